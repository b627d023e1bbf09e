"""Human-readable text for the CLI: inspect tables, conversion summaries, parity tables."""

from __future__ import annotations


def _dirs(n: int) -> str:
    return "bi" if n == 2 else "uni"


def _shape_text(sh: dict) -> str:
    return (f"input {sh['input_size']}, units {sh['units']}, {sh['num_layers']} layer(s), "
            f"{_dirs(2 if sh['bidirectional'] else 1)}, {sh['input_mode']} input, {sh['dtype']}")


def inspect_text(info: dict) -> str:
    """The inspect document (one schema, every format) as the table ``gruconv inspect`` prints."""
    lines = [f"{info['file']}: {info['summary']}"]
    for r in info["rnns"]:
        sh = r.get("shape")
        if sh:
            lines.append(f"  {r['name']}: {r['kind']}, {_shape_text(sh)}, {r['params']} params")
            lines.append(f"    -> {r['converts_to']}")
        else:
            lines.append(f"  {r['name']}: {r['kind']}, shape ambiguous")
        lines.extend(f"    {d}" for d in r.get("details", []))
        if r.get("nonfinite_weights"):
            lines.append(f"    ! {r['nonfinite_weights']} NaN/Inf weight value(s)")
    lines.extend(f"  {d}" for d in info.get("details", []))
    return "\n".join(lines)


def convert_text(result) -> str:
    if result.nothing_to_convert and not result.outputs:
        return f"{result.input}: nothing to convert (no CuDNNGRU / cuDNN GRU found); no output written"
    lines = []
    for out in result.outputs:
        lines.append(f"wrote {out}")
    for r in result.rnns:
        lines.append(f"  {r['name']}: {r['kind']} -> {r['converts_to']}")
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
