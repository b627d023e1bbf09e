"""The ``gruconv`` command: parse options, call :mod:`gruconv.api`, print, map errors to exit codes.

Exit codes come from the error classes (:mod:`gruconv.errors`: 1 parity,
2 usage, 3 input/output, 4 internal error: any exception that is not a
:class:`~gruconv.errors.GruconvError`) and are turned into one stderr line in
one place, :class:`_Group`.  No logic lives here; no TensorFlow/Keras is
imported at module level.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import click

from ._version import __version__
from .errors import GruconvError
from .options import OUTPUT_FORMATS, Bounds, Budget

#: The verdict's default bounds, for the options' defaults and help (written once: :class:`Bounds`).
_BOUNDS = Bounds()


def _short(x: float) -> str:
    """``2e-6``, ``8``: a default as the help text writes it."""
    return f"{x:g}".replace("e-0", "e-")


#: Where ``--debug`` is noted (``ctx.meta`` is shared by a context and the subcommand's).
_DEBUG_KEY = "gruconv.debug"


def _note_debug(ctx, _param, value):
    if value:
        ctx.meta[_DEBUG_KEY] = True


_DEBUG_HELP = "On an internal error (exit 4) also print the traceback (or set GRUCONV_DEBUG=1)."


def _debug_option() -> click.Option:
    return click.Option(["--debug"], is_flag=True, expose_value=False, callback=_note_debug, help=_DEBUG_HELP)


def _internal_error(e: BaseException, debug: bool) -> None:
    """A bug (an exception that is not a :class:`GruconvError`): one line, the traceback first with
    ``debug``; the caller exits :attr:`gruconv.errors.InternalError.exit_code`."""
    from .errors import InternalError

    if debug or InternalError.debug_from_env():
        import traceback

        click.echo("".join(traceback.format_exception(e)).rstrip("\n"), err=True)
        debug = True
    click.echo(InternalError.line(e, debug=debug), err=True)


class _Group(click.Group):
    """Turns every :class:`GruconvError` into one line on stderr and its exit code; any other
    exception into the internal-error line and exit 4; SIGTERM/SIGINT into cleanup and
    ``128 + signal`` (:mod:`gruconv.signals`).  ``--debug`` is accepted before the subcommand
    (``gruconv --debug convert ...``) and after it (added to every subcommand here)."""

    def add_command(self, cmd, name=None):
        if not any(p.name == "debug" for p in cmd.params):
            cmd.params.append(_debug_option())
        super().add_command(cmd, name)

    def main(self, *args, **kwargs):
        from .errors import InternalError
        from .signals import Interrupted, install, restore

        previous = install()
        try:
            return super().main(*args, **kwargs)
        except Interrupted as e:  # a signal outside invoke (option parsing, Click's own exit path)
            click.echo(f"gruconv: error: {e}; stopped, temporary files removed (an output is only ever in place complete)", err=True)
            sys.exit(e.exit_code)
        except Exception as e:  # a bug outside invoke (Click's parsing and callbacks): still one line, exit 4
            _internal_error(e, False)
            sys.exit(InternalError.exit_code)
        finally:
            restore(previous)

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as e:
            _usage_line(e)

    def invoke(self, ctx):
        from .signals import Interrupted

        try:
            return self._invoke(ctx)
        except click.UsageError as e:  # a subcommand's options: parsed here, inside invoke
            _usage_line(e)
        except Interrupted as e:
            click.echo(f"gruconv: error: {e}; stopped, temporary files removed (an output is only ever in place complete)", err=True)
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise  # Click's own exits (ctx.exit above included) keep their codes
        except Exception as e:
            # The handler's Interrupted, raised inside a C extension's callback, can surface as another
            # exception (h5py: "SystemError: <cyfunction FastRLock.__exit__> returned a result with an
            # exception set"), or be turned into a GruconvError by an except clause: a signal was
            # received, so it is reported as the interruption it is.  Otherwise it is a bug:
            # one line and exit 4, never Python's traceback and exit 1 (the parity-failure code).
            from .errors import InternalError
            from .signals import received

            signo = received()
            if signo is None:
                _internal_error(e, bool(ctx.meta.get(_DEBUG_KEY)))
                ctx.exit(InternalError.exit_code)
            intr = Interrupted(signo)
            click.echo(f"gruconv: error: {intr}; stopped, temporary files removed (an output is only ever in place complete)", err=True)
            ctx.exit(intr.exit_code)

    def _invoke(self, ctx):
        """:class:`GruconvError` and paths the OS refuses as one line -- unless a signal was received
        (then :meth:`invoke` reports the interruption)."""
        from .signals import received

        try:
            return super().invoke(ctx)
        except GruconvError as e:
            if received() is not None:
                raise
            click.echo(f"gruconv: error: {e}", err=True)
            ctx.exit(e.exit_code)
        except OSError as e:
            if received() is not None:
                raise
            # Paths the operating system itself refuses (a name longer than it allows, a symlink
            # loop) can surface from any stat: one line, the input/output exit code.
            import errno

            if e.errno not in (errno.ENAMETOOLONG, errno.ELOOP):
                raise
            from .errors import InputError
            from .files.inputs import display

            name = display(e.filename) if e.filename else "a path"
            click.echo(f"gruconv: error: {name[:120]}{'...' if len(name) > 120 else ''}: {e.strerror}",
                       err=True)
            ctx.exit(InputError.exit_code)


def _usage_line(e: "click.UsageError"):
    """Click's usage errors (``--jobs 0``, an unknown option, a missing argument) as every other
    gruconv error is shown: one ``gruconv: error:`` line, exit 2 (:class:`gruconv.errors.UsageError`),
    not Click's three-line usage block.  ``gruconv`` alone still prints the help."""
    from .errors import UsageError

    if isinstance(e, click.exceptions.NoArgsIsHelpError):
        raise e
    where = e.ctx.command_path if e.ctx is not None else "gruconv"
    click.echo(f"gruconv: error: {e.format_message().rstrip('.')} (see '{where} --help')", err=True)
    sys.exit(UsageError.exit_code)


def _warn(messages) -> None:
    for m in messages:
        click.echo(f"gruconv: warning: {m}", err=True)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog="Exit codes: 0 ok, 1 parity failure (verification found outputs outside the tolerance), "
                    "2 usage, 3 input or output problem, 4 internal error (a bug; --debug shows the traceback), "
                    "128+N stopped by signal N.")
@click.version_option(__version__, prog_name="gruconv")
@click.option("--debug", is_flag=True, expose_value=False, callback=_note_debug, help=_DEBUG_HELP)
def main():
    """Convert cuDNN-only RNN models (GRU, LSTM) into portable Keras 3 models, and prove the numbers match.

    Reads legacy Keras HDF5 files with CuDNNGRU / CuDNNLSTM layers (and the
    .keras zips tf_keras writes of them), TensorFlow 1.x tf.contrib.cudnn_rnn
    checkpoints, TF2 checkpoints and tf.keras SavedModels (format detected from
    content), as the Keras that wrote them reads them; rewrites SavedModels and
    frozen graphs (.pb, .pbtxt) holding cuDNN ops into SavedModels that serve on
    a CPU, the whole graph as ONNX, or their cuDNN stacks alone. Writes Keras 3
    .keras / .weights.h5,
    legacy-layout .h5 weights, PyTorch .safetensors and ONNX.

    \b
    Examples:
      gruconv inspect model.h5
      gruconv convert model.h5 model.keras
      gruconv verify model.h5 model.keras --tolerance 1e-5
    """


_hint_options = [
    click.option("--num-units", type=click.IntRange(1), help="TF1 opaque buffer: units per layer."),
    click.option("--input-size", type=click.IntRange(1), help="TF1 opaque buffer: input width."),
    click.option("--num-layers", type=click.IntRange(1), help="TF1 opaque buffer: layer count."),
    click.option("--direction", type=click.Choice(["uni", "bi"]), help="TF1 opaque buffer: directions."),
    click.option("--input-mode", type=click.Choice(["linear", "skip"]), help="TF1 opaque buffer: input mode."),
    click.option("--variable", help="TF1: the checkpoint key of an opaque buffer to use."),
    click.option("--rnn", "rnn", help="TF1: convert only the stack with this scope."),
    click.option("--cell", type=click.Choice(["gru", "lstm"]),
                 help="TF1 opaque buffer: the cell, where the buffer size fits both."),
    click.option("--forget-bias", type=float,
                 help="TF1 LSTM: the forget_bias its TF LSTMCell/LSTMBlockCell added at run time "
                      "(cuDNN and CudnnCompatibleLSTMCell: 0)."),
    click.option("--prefer", type=click.Choice(["canonical", "opaque"]),
                 help="TF1: which stored form defines the weights (default: canonical when present)."),
]


def hint_options(f):
    for opt in reversed(_hint_options):
        f = opt(f)
    return f


#: The bounds of a run of a user's TensorFlow graph (:class:`gruconv.options.Budget`, ``docs/graph-bounds.md``).
_graph_options = [
    click.option("--graph-timeout", type=float, metavar="SECONDS",
                 help=f"TF graph: wall time one run of the graph may take [default: {Budget().seconds:g}]."),
    click.option("--graph-memory", type=float, metavar="GIB",
                 help=f"TF graph: memory one run of the graph may use [default: {Budget().memory:g}]."),
]


def graph_options(f):
    for opt in reversed(_graph_options):
        f = opt(f)
    return f


#: The ``.tflite`` writer's profile options (``docs/edge.md``): fields of :class:`gruconv.options.Options`.
_edge_options = [
    click.option("--batch-size", type=click.IntRange(1), default=None,
                 help=".tflite: the fixed batch (default: the model's own, else 1)."),
    click.option("--micro", is_flag=True, help=".tflite: the TensorFlow Lite Micro profile (needs --timesteps)."),
    click.option("--timesteps", type=click.IntRange(1), default=None,
                 help=".tflite: fix the time axis to T steps and unroll (--micro, --int8)."),
    click.option("--int8", type=click.Path(path_type=Path, readable=False), metavar="CALIB.npz", default=None,
                 help=".tflite: full-integer ops calibrated on these representative inputs (docs/edge.md)."),
]


def edge_options(f):
    for opt in reversed(_edge_options):
        f = opt(f)
    return f


def _edge(kw: dict) -> dict:
    return {k: kw.pop(k) for k in ("batch_size", "micro", "timesteps", "int8") if k in kw}


def _hints(kw: dict) -> dict:
    hints = {k: kw.pop(k) for k in ("num_units", "input_size", "num_layers", "direction", "input_mode",
                                    "variable", "cell", "forget_bias") if k in kw}
    return {k: v for k, v in hints.items() if v is not None}


@main.command()
@click.argument("path", type=click.Path(path_type=Path, readable=False))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document instead of a table.")
@click.option("--config", type=click.Path(path_type=Path, readable=False), help="Architecture JSON for a weights-only file.")
@hint_options
def inspect(path, as_json, config, rnn, prefer, **kw):
    """List every cuDNN RNN (GRU, LSTM) in PATH and what `convert` will make of it.

    For a Keras model (Keras 3 .keras / .weights.h5 with --config / .h5, or a
    legacy HDF5 model) also says whether each recurrent layer runs on cuDNN on
    the TensorFlow, JAX and torch backends, and if not, which condition fails.
    Never imports TensorFlow or Keras; reads headers and the GRU weights only.

    \b
    Examples:
      gruconv inspect fixtures/keras/sequential.h5 --json
      gruconv inspect model.keras
    """
    from . import api, report

    info = api.inspect(path, config=config, hints=_hints(kw), rnn=rnn, prefer=prefer)
    click.echo(json.dumps(info, indent=2) if as_json else report.inspect_text(info))


def _verify_inputs(batch: int, steps: int, seed: int, int8_tolerance: Optional[float] = None) -> dict:
    """convert --verify's random inputs (``--batch``/``--steps``/``--seed``, verify's) and int8 bound, given only
    where they differ from verify's defaults (so a batch job's options stay as they were)."""
    given = {"batch": batch, "steps": steps, "seed": seed, "int8_tolerance": int8_tolerance}
    return {k: v for k, v in given.items() if v != {"batch": 2, "steps": 8, "seed": 0, "int8_tolerance": None}[k]}


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, readable=False))
@click.option("--out-dir", type=click.Path(path_type=Path, readable=False),
              help="Batch mode: convert every input (files, directories, globs) into DIR, mirroring paths.")
@click.option("--jobs", type=click.IntRange(1), help="Batch: worker processes (default: CPU count).")
@click.option("--keep-going", is_flag=True, help="Batch: convert the rest after a failure (exit 3 at the end, 4 if an input hit an internal error).")
@click.option("--skip-existing", is_flag=True, help="Batch: skip inputs that DIR/.gruconv.batch.json records as converted, input and output unchanged since.")
@click.option("--shard", metavar="K/N", help="Batch: convert only the K-th of N deterministic parts (1-based).")
@click.option("--report", "report_path", type=click.Path(path_type=Path, readable=False), help="Batch: write a JSON report.")
@click.option("--junit", type=click.Path(path_type=Path, readable=False), help="Batch: write a JUnit XML report.")
@click.option("--html", "html_dir", type=click.Path(path_type=Path, readable=False),
              help="Batch: write one HTML page per input (its --verify report) and DIR/index.html.")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT; also write a model with nothing to convert.")
@click.option("--format", "fmt", type=click.Choice(list(OUTPUT_FORMATS)),
              help="Output format (default from OUTPUT's name: .keras model; .weights.h5 Keras 3 weights; "
                   ".h5 legacy-layout weights for Keras 2/tf_keras and Keras 3 load_weights; .safetensors "
                   "torch.nn.GRU/LSTM state dicts; .onnx one ONNX model per RNN stack; .xml an OpenVINO IR "
                   "(+ .bin) per RNN stack; saved-model: a TensorFlow "
                   "graph holding cuDNN ops as a SavedModel directory that serves on a CPU, the default for such "
                   "an input and an OUTPUT without a model suffix).")
@click.option("--config", type=click.Path(path_type=Path, readable=False),
              help="Architecture JSON (model.to_json()) to turn a weights-only file into a .keras model.")
@click.option("--initial-state", is_flag=True, help="TF1: add initial-state inputs, one per layer and direction.")
@click.option("--return-state", is_flag=True, help="TF1: add final-state outputs, in cuDNN order.")
@click.option("--mask-input", is_flag=True,
              help="TF1: add a (batch, time) bool mask input for variable lengths (right-padded).")
@click.option("--check-load", is_flag=True,
              help="Load the .keras / .weights.h5 output with Keras (plain load_model) and compare every weight "
                   "by digest before placing it (needs Keras and a backend; implied by --verify).")
@click.option("--custom-objects", type=click.Path(path_type=Path, readable=False), metavar="FILE.py",
              help="Your Python file defining the Keras 3 classes of the model's custom layers: --check-load / "
                   "--verify load the output with them (imported only when given).")
@click.option("--verify", is_flag=True, help="Check numerical parity after converting (see `gruconv verify`).")
@click.option("--tolerance", type=float, default=_BOUNDS.tolerance, show_default=True,
              help="Parity tolerance for --verify.")
@click.option("--rtol", type=click.FloatRange(0), default=None, help="--verify: relative bound (see `gruconv verify`).")
@click.option("--floor-k", type=click.FloatRange(0), default=None,
              help="--verify: multiple of the float32 sensitivity floor (see `gruconv verify`).")
@click.option("--batch", "verify_batch", type=click.IntRange(1), default=2, show_default=True,
              help="--verify: random input batch size.")
@click.option("--steps", "verify_steps", type=click.IntRange(1), default=8, show_default=True,
              help="--verify: random input time steps.")
@click.option("--seed", "verify_seed", type=int, default=0, show_default=True, help="--verify: seed of the random inputs.")
@click.option("--int8-tolerance", type=click.FloatRange(0), default=None,
              help="--verify of an --int8 .tflite: max abs error allowed against the float model [default: 0.05, "
                   "docs/edge.md].")
@hint_options
@graph_options
@edge_options
def convert(paths, out_dir, jobs, keep_going, skip_existing, shard, report_path, junit, html_dir, force, fmt, config,
            initial_state, return_state, mask_input, check_load, custom_objects, verify, tolerance, rtol, floor_k,
            verify_batch, verify_steps, verify_seed, int8_tolerance, rnn, prefer, graph_timeout, graph_memory, **kw):
    """Convert INPUT (Keras HDF5, tf_keras .keras or SavedModel, TF1/TF2 checkpoint, graph with cuDNN ops) into OUTPUT (.keras, .weights.h5, .h5, .safetensors, .onnx, SavedModel dir).

    Usage: gruconv convert INPUT OUTPUT, or gruconv convert INPUT... --out-dir DIR.

    INPUT: a legacy Keras HDF5 model or weights file with CuDNNGRU / CuDNNLSTM
    layers (weights-only with --config ARCH.json), a tf_keras .keras zip, a TF
    1.x tf.contrib.cudnn_rnn checkpoint, a TF 2 object checkpoint or a tf.keras
    SavedModel directory (architecture from its keras_metadata.pb, or TF 2.0-2.4's object graph). OUTPUT (from its name, or
    --format): a Keras 3 .keras model; Keras 3 .weights.h5; legacy-layout .h5
    weights (Keras 3 `model.load_weights()` into the same architecture with GRU
    in place of CuDNNGRU); PyTorch .safetensors (torch.nn.GRU/LSTM state
    dicts); ONNX (one GRU/LSTM model per stack); OpenVINO IR (.xml + .bin, one
    GRUSequence/LSTMSequence per layer, float32). A SavedModel or frozen
    graph (.pb/.pbtxt) holding CudnnRNN ops becomes a SavedModel directory
    with each cuDNN node replaced by standard ops (serves on a CPU; needs
    TensorFlow), or with an OUTPUT.onnx name the whole graph as ONNX (needs
    tf2onnx), or with a .keras/.safetensors name (or --format keras|onnx DIR)
    its cuDNN stacks alone, params as the graph computes them (needs
    TensorFlow). A legacy file is read as the
    Keras that wrote it reads it (docs/legacy-dialects.md). Written
    atomically; an existing OUTPUT is refused without --force.

    \b
    Examples:
      gruconv convert model.h5 model.keras
      gruconv convert ckpt_dir/ model.keras --rnn encoder/cudnn_gru
      gruconv convert gpu_model/ cpu_model/
      gruconv convert gpu_model/ model.onnx
      gruconv convert ckpt_dir/ encoder.xml --rnn encoder/cudnn_gru
      gruconv convert models/ --out-dir converted/ --jobs 2 --keep-going --report r.json --junit r.xml
    """
    from . import api, report
    from .errors import ParityError, UsageError
    from .options import Options

    edge = _edge(kw)
    if int8_tolerance is not None and not (verify and edge.get("int8") is not None):
        raise UsageError("--int8-tolerance applies to convert --verify of an --int8 .tflite only")
    options = Options(force=force, format=fmt, config=config, hints=_hints(kw), rnn=rnn, prefer=prefer, **edge,
                      initial_state=initial_state, return_state=return_state, mask_input=mask_input,
                      check_load=check_load, custom_objects=custom_objects, graph_timeout=graph_timeout,
                      graph_memory=graph_memory)
    bounds = Bounds.of(tolerance, rtol, floor_k)
    if out_dir is not None:
        from . import batch

        summary = batch.convert_many(list(paths), out_dir, jobs=jobs, keep_going=keep_going,
                                     skip_existing=skip_existing, shard=shard, report=report_path, junit=junit, html=html_dir,
                                     verify=verify, bounds=bounds,
                                     **_verify_inputs(verify_batch, verify_steps, verify_seed, int8_tolerance),
                                     print_fn=click.echo, **options.to_json())
        sys.exit(summary.exit_code)
    batch_only = [n for n, v in (("--jobs", jobs), ("--keep-going", keep_going), ("--skip-existing", skip_existing),
                                 ("--shard", shard), ("--report", report_path), ("--junit", junit),
                                 ("--html", html_dir)) if v]
    if batch_only:
        raise UsageError(f"{', '.join(batch_only)} only apply with --out-dir")
    if len(paths) != 2:
        raise UsageError(f"expected INPUT OUTPUT (or INPUT... --out-dir DIR), got {len(paths)} path(s)")
    input, output = paths
    from .progress import on_terminal

    with on_terminal():   # "convert: layer 3/6 ..." on a terminal's stderr, nothing otherwise
        result = api.convert(input, output, options, verify=verify, bounds=bounds,
                             **_verify_inputs(verify_batch, verify_steps, verify_seed, int8_tolerance))
    _warn(result.warnings)
    click.echo(report.convert_text(result))
    if result.verification is not None and not result.verification["passed"]:
        click.echo(f"gruconv: error: {report.parity_line(result.verification)}; nothing written", err=True)
        sys.exit(ParityError.exit_code)


@main.command()
@click.argument("input", type=click.Path(path_type=Path, readable=False))
@click.argument("converted", required=False, type=click.Path(path_type=Path, readable=False))
@click.option("--tolerance", type=float, default=_BOUNDS.tolerance, show_default=True, help="Max abs error allowed.")
@click.option("--rtol", type=click.FloatRange(0), default=None,
              help=f"Also pass within RTOL x max|reference| of the output [default: {_short(_BOUNDS.rtol)}, "
                   "docs/verdicts.md].")
@click.option("--floor-k", type=click.FloatRange(0), default=None,
              help=f"Also pass within K x the measured float32 sensitivity floor [default: {_short(_BOUNDS.k)}, "
                   "docs/verdicts.md].")
@click.option("--reference", type=click.Choice(["auto", "cudnn", "oracle"]), default="auto", show_default=True,
              help="cudnn: real cuDNN on a GPU (ctypes); oracle: float64 NumPy; auto: cudnn if usable.")
@click.option("--allow-tf32", is_flag=True, help="Let cuDNN use TF32 tensor cores (expect ~5e-4 errors).")
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu", "both"]), default="auto", show_default=True,
              help="Where the converted model runs: cpu; gpu (the backend's own GPU path, strict fp32 and "
                   "default math); both; auto = both where the backend has a GPU, else cpu.")
@click.option("--batch", type=click.IntRange(1), default=2, show_default=True, help="Random input batch size.")
@click.option("--steps", type=click.IntRange(1), default=8, show_default=True, help="Random input time steps.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--inputs", type=click.Path(path_type=Path, readable=False), help="An .npz of input arrays (model input order).")
@click.option("--json", "json_path", type=click.Path(path_type=Path, readable=False), help="Also write the report as JSON.")
@click.option("--html", "html_path", type=click.Path(path_type=Path, readable=False),
              help="Also write the report as one self-contained HTML page (per check its error at each time step).")
@click.option("--config", type=click.Path(path_type=Path, readable=False), help="Architecture JSON for a weights-only file.")
@click.option("--custom-objects", type=click.Path(path_type=Path, readable=False), metavar="FILE.py",
              help="Your Python file defining the Keras 3 classes of the model's custom layers (imported only "
                   "when given); without it such a model's cuDNN layers are checked one by one.")
@click.option("--int8-tolerance", type=click.FloatRange(0), default=None,
              help="An int8 .tflite: max abs error allowed against the float model [default: 0.05, docs/edge.md].")
@hint_options
@graph_options
def verify(input, converted, tolerance, rtol, floor_k, reference, allow_tf32, device, batch, steps, seed, inputs,
           json_path, html_path, config, custom_objects, int8_tolerance, rnn, prefer, graph_timeout, graph_memory,
           **kw):
    """Check that CONVERTED (or INPUT converted in memory) computes what INPUT computed.

    Runs the ORIGINAL parameters through the reference (real cuDNN on a GPU,
    or a float64 oracle) and the converted model (Keras 3; a .safetensors by
    torch, an .onnx by onnxruntime) on the CPU and, with
    --device gpu/both, on the backend's GPU path (strict fp32, and the
    framework's default math as information), per recurrent layer and end to
    end. A check passes within --tolerance (absolute), --rtol of the reference's
    magnitude, or --floor-k times how far float32 rounding alone moves that output
    (measured per check); the report says which bound decided. Exit 0 when every
    check passes, 1 otherwise (NaN/Inf outputs never pass).

    \b
    Example:
      gruconv verify model.h5 model.keras --tolerance 1e-5
    """
    from . import api, report
    from .errors import ParityError
    from .verify import verify as _verify

    if json_path is not None or html_path is not None:   # refused before the verification runs, not after
        from .files.outputs import check_target

        given = [p for p in (json_path, html_path) if p is not None]
        api.check_not_inputs(given, input, converted, config, inputs, custom_objects)
        for p in given:
            check_target(p, force=True)
    from .progress import on_terminal

    with on_terminal():   # "verify: layer 3/6 ..." on a terminal's stderr, nothing otherwise
        rep = _verify(input, converted, bounds=Bounds.of(tolerance, rtol, floor_k), reference=reference,
                      allow_tf32=allow_tf32, batch=batch, steps=steps, seed=seed, inputs=inputs, device=device,
                      config=config, hints=_hints(kw), prefer=prefer, rnn=rnn, custom_objects=custom_objects,
                      graph_timeout=graph_timeout, graph_memory=graph_memory, int8_tolerance=int8_tolerance)
    data = rep.to_json()
    if json_path is not None:
        from .files.outputs import atomic_path

        with atomic_path(json_path, force=True) as tmp:
            tmp.write_text(json.dumps(data, indent=2))
    if html_path is not None:
        from .files.outputs import atomic_path
        from .report_html import verify_page

        with atomic_path(html_path, force=True) as tmp:
            tmp.write_text(verify_page(data), encoding="utf-8")
    click.echo(report.verify_text(data))
    if not rep.passed:
        click.echo(f"gruconv: error: {report.parity_line(data)}", err=True)
        sys.exit(ParityError.exit_code)

