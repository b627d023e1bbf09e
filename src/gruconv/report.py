"""Human-readable text for the CLI: inspect tables, conversion summaries, parity tables."""

from __future__ import annotations


def _dirs(n: int) -> str:
    return "bi" if n == 2 else "uni"


def inspect_text(info: dict) -> str:
    lines = []
    if info["format"] == "keras-h5":
        what = "Keras HDF5 model" if info["kind"] == "model" else "Keras HDF5 weights (no architecture)"
        ver = f"keras {info['keras_version']}" if info.get("keras_version") else "keras version unknown"
        lines.append(f"{info['file']}: {what} ({ver}), {info['layers']} top-level layer(s)")
        rnns = info["rnns"]
        if not rnns:
            lines.append("  no CuDNNGRU layers: nothing to convert")
        for r in rnns:
            lines.append(
                f"  {r['path']}: {r['kind']}, input {r['input_size']}, units {r['units']}, "
                f"{r['layers']} layer(s), {_dirs(r['directions'])}, {r['input_mode']} input, {r['dtype']}, "
                f"{r['params']} params")
            lines.append(f"    -> {r['converts_to']}")
            if r.get("nonfinite_weights"):
                lines.append(f"    ! {r['nonfinite_weights']} NaN/Inf weight value(s)")
        if info.get("lambda_layers"):
            lines.append(f"  Lambda layers (refused by convert): {', '.join(info['lambda_layers'])}")
        if info.get("optimizer_weights"):
            lines.append(f"  optimizer state: {info['optimizer_weights']} tensors (dropped by convert)")
        return "\n".join(lines)
    return checkpoint_text(info)


def checkpoint_text(info: dict) -> str:
    lines = [f"{info['file']}: TensorFlow checkpoint {info.get('prefix', '')}, "
             f"{info.get('tensor_count', 0)} tensors, {info.get('total_bytes', 0)} bytes"]
    for s in info.get("stacks", []):
        sh = s.get("shape")
        if sh:
            lines.append(
                f"  {s['scope']}: cuDNN GRU, input {sh['input_size']}, units {sh['units']}, "
                f"{sh['num_layers']} layer(s), {'bi' if sh['bidirectional'] else 'uni'}, {sh['input_mode']} input, "
                f"{sh['dtype']}, {s['params']} params")
        else:
            lines.append(f"  {s['scope']}: cuDNN GRU buffer, shape ambiguous")
        if s.get("converts_to") and sh:
            lines.append(f"    -> {s['converts_to']}")
        lines.append(f"    defined by: {s['source']}")
        if s.get("opaque"):
            lines.append(f"    opaque buffer: {s['opaque']}")
        if s.get("cross_check"):
            lines.append(f"    cross-check: {s['cross_check']}")
        cands = s.get("candidates") or []
        if cands and not sh:
            lines.append(f"    {len(cands)} candidate shape(s) for {s.get('buffer_size')} values:")
            for c in cands[:20]:
                lines.append(
                    f"      input {c['input_size']}, units {c['units']}, {c['num_layers']} layer(s), "
                    f"{'bi' if c['bidirectional'] else 'uni'}, {c['input_mode']}")
            if len(cands) > 20:
                lines.append(f"      ... {len(cands) - 20} more (add --num-units/--num-layers/--direction)")
        if s.get("nonfinite_weights"):
            lines.append(f"    ! {s['nonfinite_weights']} NaN/Inf weight value(s)")
        if s.get("slots"):
            lines.append(f"    optimizer slots (dropped by convert): {', '.join(s['slots'])}")
    for b in info.get("possible_buffers", []):
        lines.append(f"  possible opaque buffer: {b['key']} ({b['size']} {b['dtype']} values): "
                     f"pass --variable {b['key']} and shape hints to use it")
    for w in info.get("warnings", []):
        lines.append(f"  ! {w}")
    other = info.get("other_tensors", {})
    lines.append(f"  other tensors: {other.get('count', 0)} ({other.get('bytes', 0)} bytes), "
                 "copied to OUT.rest.npz by convert")
    return "\n".join(lines)


def convert_text(result) -> str:
    if result.nothing_to_convert and not result.outputs:
        return f"{result.input}: nothing to convert (no CuDNNGRU / cuDNN GRU found); no output written"
    lines = []
    for out in result.outputs:
        lines.append(f"wrote {out}")
    for s in result.stacks:
        name = s.get("path") or s.get("scope")
        lines.append(f"  {name}: {s.get('kind', 'cuDNN GRU')} -> {s.get('converts_to', 'GRU')}")
    if result.verification is not None:
        lines.append(verify_text(result.verification))
    return "\n".join(lines)


def verify_text(rep: dict) -> str:
    if rep.get("nothing_to_convert"):
        return f"{rep['input']}: nothing to convert (no CuDNNGRU / cuDNN GRU found); nothing to verify"
    lines = [f"reference: {rep['reference']} ({rep.get('reference_reason', '')}), math: {rep['math_mode']}"]
    hdr = f"  {'check':<40} {'max abs':>10} {'max rel':>10} {'ref vs f64':>10} {'tol':>8}  result"
    lines.append(hdr)
    for c in rep["checks"]:
        name = c["name"] if len(c["name"]) <= 40 else c["name"][:18] + "..." + c["name"][-19:]
        floor = c.get("reference_error")
        floor_s = "-" if floor is None else f"{floor:.2e}"
        lines.append(
            f"  {name:<40} {c['max_abs']:>10.2e} {c['max_rel']:>10.2e} {floor_s:>10} "
            f"{c['tolerance']:>8.0e}  {'ok' if c['passed'] else 'FAIL'}")
    for n in rep.get("notes", []):
        lines.append(f"note: {n}")
    nonfinite = sum(c.get("nonfinite", 0) for c in rep["checks"])
    if nonfinite:
        lines.append(f"note: {nonfinite} NaN/Inf output value(s) among the compared outputs")
    lines.append("parity: " + ("PASS" if rep["passed"] else "FAIL") +
                 f" ({sum(c['passed'] for c in rep['checks'])}/{len(rep['checks'])} checks within "
                 f"{rep['tolerance']:g})")
    return "\n".join(lines)
