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
            lines.extend(f"    -> {fmt}: {what}" for fmt, what in (r.get("targets") or {}).items())
        else:
            lines.append(f"  {r['name']}: {r['kind']}, shape ambiguous")
        lines.extend(f"    {d}" for d in r.get("details", []))
        if r.get("nonfinite_weights"):
            lines.append(f"    ! {r['nonfinite_weights']} NaN/Inf weight value(s)")
    lines.extend(f"  {d}" for d in info.get("details", []))
    for fmt, found in (info.get("edge_profiles") or {}).items():
        lines.extend(f"  {fmt} {profile}: {text}" for profile, text in found.items())
    if info.get("cudnn_eligibility"):
        from .eligibility import text_lines

        lines.extend(text_lines(info["cudnn_eligibility"]))
    return "\n".join(lines)


def convert_text(result) -> str:
    if result.nothing_to_convert and not result.outputs and result.reason:
        return f"{result.input}: {result.reason}; no output written"
    if result.nothing_to_convert and not result.outputs:
        return f"{result.input}: nothing to convert (no cuDNN RNN: CuDNNGRU/CuDNNLSTM layer or cudnn_rnn stack); no output written"
    lines = []
    for out in result.outputs:
        lines.append(f"wrote {out}")
    for r in result.rnns:
        lines.append(f"  {r['name']}: {r['kind']} -> {r['converts_to']}")
    if result.verification is not None:
        lines.append(verify_text(result.verification))
    return "\n".join(lines)


def bound_text(c: dict) -> str:
    """The bound that decided a row and its value: ``tol 1e-05``, ``rtol 7.7e-05``, ``8xfloor 2.1e-06``;
    ``none`` for a failure (its reason line says by how much)."""
    bound = c.get("bound")
    limits = c.get("limits") or {}
    if bound is None:  # a row made without the floor rule
        return f"tol {c['tolerance']:.0e}"
    if bound == "none":
        return "none"
    label = {"tolerance": "tol", "rtol": "rtol", "floor": "k*floor"}[bound]
    return f"{label} {limits.get(bound, c['tolerance']):.1e}"


def kernels_text(d: dict) -> str:
    """A device run's recurrent kernels (``gru: 2 cudnn, lstm: 1 fallback``), for the text and HTML reports."""
    return ", ".join(f"{op}: " + ", ".join(f"{n} {how}" for how, n in hows.items())
                     for op, hows in (d.get("kernels") or {}).items()) or "no recurrent call recorded"


def verify_text(rep: dict) -> str:
    """The parity table: per check its max abs / rel difference, the reference's own error against
    float64 ("ref vs f64"), the measured float32 sensitivity floor, the bound that decided it (with
    its value) and the result; then devices, notes, failure reasons and the verdict line."""
    if rep.get("nothing_to_convert"):
        return f"{rep['input']}: nothing to convert (no cuDNN RNN: CuDNNGRU/CuDNNLSTM layer or cudnn_rnn stack); nothing to verify"
    lines = [f"reference: {rep['reference']} ({rep.get('reference_reason', '')}), math: {rep['math_mode']}"]
    env = rep.get("environment") or {}
    if env.get("converted_by"):
        lines.append(f"converted model: {'; '.join(env['converted_by'])}, inputs batch {rep.get('batch')} x steps {rep.get('steps')}")
    elif env.get("backend"):
        lines.append(f"converted model: Keras {env.get('keras', '?')} on {env['backend']}, "
                     f"inputs batch {rep.get('batch')} x steps {rep.get('steps')}")
    devices = sorted({c.get("device", "cpu") for c in rep["checks"]})
    show_device = devices != ["cpu"]
    hdr = (f"  {'check':<40} {'max abs':>9} {'max rel':>9} {'ref vs f64':>10} {'floor':>9}  "
           f"{'decided by':<16} result")
    if show_device:
        hdr = f"  {'device':<12}" + hdr[1:]
    lines.append(hdr)
    for c in rep["checks"]:
        name = c["name"] if len(c["name"]) <= 40 else c["name"][:18] + "..." + c["name"][-19:]
        ref_err = c.get("reference_error")
        ref_s = "-" if ref_err is None else f"{ref_err:.2e}"
        floor = c.get("floor")
        floor_s = "-" if floor is None else f"{floor:.2e}"
        verdict = "ok" if c["passed"] else "FAIL"
        if not c.get("counts", True):
            verdict = "(info) " + ("within" if c["passed"] else "over")
        row = (f"  {name:<40} {c['max_abs']:>9.2e} {c['max_rel']:>9.2e} {ref_s:>10} {floor_s:>9}  "
               f"{bound_text(c):<16} {verdict}")
        if show_device:
            row = f"  {c.get('device', 'cpu'):<12}" + row[1:]
        lines.append(row)
    for d in rep.get("devices", []):
        if d.get("ran"):
            lines.append(f"{d['device']}: {d.get('math', '')}; {d.get('reason', '')}; kernels: {kernels_text(d)}")
    lines += _algorithm_notes(rep)
    for n in rep.get("notes", []):
        lines.append(f"note: {n}")
    for c in rep["checks"]:
        if c.get("reason") and not c["passed"]:
            lines.append(f"{'fail' if c.get('counts', True) else 'info'}: {c.get('device', 'cpu')} {c['name']}: "
                         f"{c['reason']}")
    floors = {c["tolerance"] for c in rep["checks"] if " int8: " not in c["name"]}
    if any(t != rep["tolerance"] for t in floors):
        lines.append(f"note: tolerance applied {', '.join(f'{t:g}' for t in sorted(floors))} (float16 checks use "
                     f"the float16 floor, not the requested {rep['tolerance']:g})")
    int8 = sorted({c["tolerance"] for c in rep["checks"] if " int8: " in c["name"]})
    if int8:
        lines.append(f"note: int8 rows: the file against the float model it was quantized from, within "
                     f"--int8-tolerance {', '.join(f'{t:g}' for t in int8)} (absolute)")
    counted = [c for c in rep["checks"] if c.get("counts", True)]
    tol = f" {next(iter(floors)):g}" if len(floors) == 1 else ""
    from .options import Bounds

    default = Bounds()  # a report without them: the defaults
    rule = f"tolerance{tol}, rtol {rep.get('rtol', default.rtol):g} x max|ref|, {rep.get('floor_k', default.k):g} x floor"
    secs = rep.get("floor_seconds")
    if secs:
        lines.append(f"note: floors measured in {secs:.2f} s (3 one-ulp-perturbed float32 reference runs per check group)")
    lines.append("parity: " + ("PASS" if rep["passed"] else "FAIL") +
                 f" ({sum(c['passed'] for c in counted)}/{len(counted)} checks within bounds: {rule})")
    return "\n".join(lines)


def _algorithm_notes(rep: dict) -> list:
    """Per device, the rows compared with another cuDNN algorithm than the standard one (the closest:
    ``gruconv.verify.verdicts.judge``), and how far the standard one was."""
    out = []
    for dev in sorted({c.get("device", "cpu") for c in rep["checks"]}):
        rows = [c for c in rep["checks"] if c.get("device", "cpu") == dev and c.get("by_algorithm")]
        moved = [c for c in rows if c.get("reference_algorithm") not in (None, "standard")]
        if not moved:
            continue
        counts: dict = {}
        for c in moved:
            counts[c["reference_algorithm"]] = counts.get(c["reference_algorithm"], 0) + 1
        algos = ", ".join(f"{a} ({n})" if len(counts) > 1 else a for a, n in sorted(counts.items()))
        std = max(c["by_algorithm"].get("standard", 0.0) for c in moved)
        out.append(f"note: {dev}: {len(moved)} of {len(rows)} row(s) compared with cuDNN's {algos} run"
                   f"{'s' if len(counts) > 1 else ''} of the original, the closest of its algorithms (its standard one is up to {std:.2e} away: "
                   "cuDNN's algorithms round differently)")
    return out


def parity_line(rep: dict) -> str:
    """The one stderr line of a failed parity check: how many checks failed, and the first reason."""
    counted = [c for c in rep["checks"] if c.get("counts", True)]
    bad = [c for c in counted if not c["passed"]]
    first = f" (first: {bad[0].get('device', 'cpu')} {bad[0]['name']}: {bad[0].get('reason') or 'outside every bound'})" \
        if bad else ""
    return f"{rep['input']}: parity FAIL, {len(bad)} of {len(counted)} check(s) outside every bound{first}"
