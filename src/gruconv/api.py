"""The Python API: every CLI command is one function here (the CLI only parses and prints).

>>> from gruconv import api
>>> api.inspect("fixtures/keras/sequential.h5")["rnns"][0]["units"]   # doctest: +SKIP
>>> api.convert("in.h5", "out.keras")                                 # doctest: +SKIP
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from . import formats
from .cudnn_layout import params_size
from .errors import InputError, UsageError
from .outputs import atomic_path, check_target, staging_dir

OUTPUT_FORMATS = ("keras", "h5-weights")


@dataclass
class ConvertResult:
    """What a conversion did: for reports, batch summaries and the CLI."""

    input: str
    format: str
    outputs: list = field(default_factory=list)
    stacks: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    nothing_to_convert: bool = False
    verification: Optional[dict] = None

    def to_json(self) -> dict:
        return {
            "input": self.input, "format": self.format, "outputs": self.outputs,
            "stacks": self.stacks, "warnings": self.warnings,
            "nothing_to_convert": self.nothing_to_convert, "verification": self.verification,
        }


def _load_config(config) -> Optional[dict]:
    if config is None or isinstance(config, dict):
        return config
    p = Path(config)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot read architecture ({e.strerror})", path=p) from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise InputError(f"architecture is not valid JSON ({e})", path=p) from None


# --------------------------------------------------------------------------- inspect

def inspect(path, **hints) -> dict:
    """Describe every cuDNN RNN in a file, and what ``convert`` would produce. No TensorFlow/Keras."""
    path = Path(path)
    fmt = formats.detect(path)
    if fmt == "keras-h5":
        return _inspect_keras_h5(path, hints.get("config"))
    return formats.reader(fmt).inspect(path, **hints)


def _rnn_summary(rnn, nonfinite: Optional[int] = None) -> dict:
    """One CuDNNGRU (a ``formats.keras_h5.KerasRNN``) as inspect and convert report it.

    ``nonfinite`` None: count NaN/Inf by reading this layer's weights now (inspect), then let them go.
    """
    s = rnn.shape
    if nonfinite is None:
        nonfinite = rnn.stack.nonfinite_count()
        rnn.release()
    kind = "CuDNNGRU" if rnn.wrapper is None else f"{rnn.wrapper}(CuDNNGRU)"
    opts = {k: v for k, v in rnn.options.items() if v}
    gru = "GRU(units={}, activation='tanh', recurrent_activation='sigmoid', reset_after=True{})".format(
        s.units, "".join(f", {k}=True" for k in opts))
    produces = gru if rnn.wrapper is None else (
        f"Bidirectional({gru}, merge_mode={rnn.merge_mode!r})" if rnn.wrapper == "Bidirectional"
        else f"{rnn.wrapper}({gru})")
    return {
        "path": rnn.path, "kind": kind, "input_size": s.input_size, "units": s.units,
        "layers": s.num_layers, "directions": s.num_directions, "input_mode": s.input_mode,
        "dtype": s.dtype, "params": params_size(s), "options": opts,
        "merge_mode": rnn.merge_mode, "nonfinite_weights": nonfinite,
        "converts_to": produces,
    }


def _inspect_keras_h5(path: Path, config=None) -> dict:
    from .formats import keras_h5

    doc = keras_h5.read(path, config=_load_config(config))
    return {
        "file": str(path), "format": "keras-h5", "kind": doc.kind,
        "keras_version": doc.keras_version, "backend": doc.backend,
        "model_name": (doc.model_config or {}).get("config", {}).get("name")
        if isinstance((doc.model_config or {}).get("config"), dict) else None,
        "layers": len(doc.layer_names),
        "rnns": [_rnn_summary(r) for r in doc.rnns],
        "plain_gru_layers": doc.other_gru_layers,
        "lambda_layers": doc.lambdas,
        "optimizer_weights": doc.optimizer_weight_count,
        "training_config": doc.training_config is not None,
    }


# --------------------------------------------------------------------------- convert

def _output_format(out: Path, fmt: Optional[str]) -> str:
    if fmt is not None:
        if fmt not in OUTPUT_FORMATS:
            raise UsageError(f"--format must be one of {', '.join(OUTPUT_FORMATS)}, got {fmt!r}", path=out)
        return fmt
    if out.suffix.lower() in (".h5", ".hdf5"):
        return "h5-weights"
    if out.suffix.lower() == ".keras":
        return "keras"
    raise UsageError(f"cannot tell the output format from {out.name!r}: use a .keras or .h5 name, or --format",
                     path=out)


def convert(input, output, *, force: bool = False, format: Optional[str] = None, config=None,
            verify: bool = False, tolerance: float = 1e-5,
            **tf1_options) -> ConvertResult:
    """Convert one input file into a Keras 3 model (``.keras``) or a legacy weights file (``.h5``).

    Raises a :class:`~gruconv.errors.GruconvError` for anything the user can
    fix; writes nothing unless the whole conversion succeeds.
    """
    input, output = Path(input), Path(output)
    fmt = formats.detect(input)
    if fmt == "keras-h5":
        result = _convert_keras_h5(input, output, force=force, fmt=format, config=_load_config(config))
    else:
        result = formats.reader(fmt).convert(input, output, force=force, **tf1_options)
    if verify and not result.nothing_to_convert:
        from .verify import verify as _verify

        report = _verify(input, result.outputs[0] if result.outputs else None, tolerance=tolerance,
                         config=config, **{k: v for k, v in tf1_options.items() if k in ("hints", "prefer", "rnn")})
        result.verification = report.to_json()
    return result


def _summarise(result: ConvertResult, doc, nonfinite: dict) -> None:
    for rnn in doc.rnns:
        bad = nonfinite.get(rnn.path, 0)
        result.stacks.append(_rnn_summary(rnn, bad))
        if bad:
            result.warnings.append(f"{rnn.path}: {bad} NaN/Inf weight value(s) carried over unchanged")


def _convert_keras_h5(input: Path, output: Path, *, force: bool, fmt: Optional[str],
                      config: Optional[dict]) -> ConvertResult:
    from .errors import UnsupportedError
    from .formats import keras3, keras_h5

    doc = keras_h5.read(input, config=config)
    result = ConvertResult(input=str(input), format="keras-h5")
    out_fmt = _output_format(output, fmt)
    if doc.lambdas and out_fmt == "keras":
        # Building a Keras model calls every layer on symbolic inputs: a Lambda's code would run.
        raise UnsupportedError(
            f"model has Lambda layer(s) {', '.join(doc.lambdas)} holding Python code; gruconv never runs it, "
            "and a .keras model cannot be built without running it (--format h5-weights writes the "
            "converted weights alone, no code)", path=input)
    if not doc.rnns:
        result.nothing_to_convert = True
        if not force:
            return result
    if out_fmt == "keras" and doc.model_config is None:
        raise UsageError("a weights-only file needs --config ARCH.json (the model's to_json()) to become "
                         "a .keras model; or write a .h5 weights file", path=input)
    for rnn in doc.rnns:
        if (rnn.config.get("config") or {}).get("bias_constraint"):
            result.warnings.append(
                f"{rnn.path}: bias_constraint carried over, but GRU's bias is (2, 3*units) where CuDNNGRU's was "
                "(6*units,): an axis-based constraint (e.g. MaxNorm) acts differently if you train further")
    check_target(output, force=force)
    if doc.optimizer_weight_count:
        result.warnings.append(
            f"optimizer state ({doc.optimizer_weight_count} tensors) dropped: its slots follow the CuDNNGRU "
            "weight layout; the converted model starts with a fresh optimizer")
    if out_fmt == "h5-weights":
        with atomic_path(output, force=force, suffix=".h5") as tmp:
            nonfinite = keras_h5.write(doc, tmp, include_model=False)
        _summarise(result, doc, nonfinite)
        result.outputs.append(str(output))
        return result
    with staging_dir(output.parent) as td:
        legacy = Path(td) / "converted.h5"
        nonfinite = keras_h5.write(doc, legacy, include_model=True, zero_init=True)
        _summarise(result, doc, nonfinite)
        originals = keras_h5.original_initializers(doc)
        model = keras3.load_legacy(legacy, compile=False, source=input)
        keras3.restore_initializers(model, originals, source=input)
        if doc.training_config:
            problem = keras3.compile_from_training_config(model, doc.training_config)
            if problem:
                result.warnings.append(problem)
        with atomic_path(output, force=force, suffix=".keras") as tmp:
            keras3.save(model, tmp)
    result.outputs.append(str(output))
    return result
