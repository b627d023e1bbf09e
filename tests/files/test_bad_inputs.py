"""Bad input never crashes, never runs code, never loses data.

Every case of ``tests/make_bad_inputs.py`` is run through the CLI and checked against the
table :data:`EXPECTED` below:

* the exit code (3 bad input / unsupported / output problem, 2 usage, 1 parity, 0 for the few
  valid-but-awkward inputs);
* on failure, exactly ONE line on stderr, ``gruconv: error: <path>: <reason in words>``, naming
  the file, with no traceback and no Python exception class names;
* no file at the output path afterwards (a pre-existing output untouched), and no temporary
  files left beside it;
* the input byte-identical afterwards (SHA-256 of every file before/after);
* code-execution bait (a marshalled ``Lambda``, a hostile ``module``) never runs.

Most cases run in-process through click's ``CliRunner`` (stderr is kept separate from stdout
in click 8.2+); :data:`SUBPROCESS` run the installed ``gruconv`` console script, for real exit
codes and a real stderr (TensorFlow's C++ start-up logging would show up there).

Cases listed in :data:`PENDING` show a bug outside the files this suite's author may touch; all
the safety checks still run for them, and only the pending part makes them xfail.  When the
bug is fixed the test fails with "fixed: remove from PENDING".
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
from click.testing import CliRunner

from gruconv.cli import main
from make_bad_inputs import Case, make_corpus

GRUCONV = Path(sys.executable).with_name("gruconv")
ROOT_DIR = Path(__file__).resolve().parents[2]
FIXTURE_SEQ = ROOT_DIR / "fixtures" / "keras" / "sequential.h5"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _have(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


HAVE = {"tf1": _have("gruconv.readers.tf1"), "batch": _have("gruconv.batch")}


@dataclass(frozen=True)
class Expect:
    code: int
    message: Optional[str] = None    # regex the one stderr line must match (error cases)
    names: str = "input"             # which path the error line must name: input | output
    warning: Optional[str] = None    # exit 0: regex a "gruconv: warning:" line must match
    stdout: Optional[str] = None     # regex stdout must match


E3 = lambda msg, **kw: Expect(3, msg, **kw)  # noqa: E731

NOT_MODEL = r"not a Keras HDF5 file nor a TensorFlow checkpoint"
NOT_HDF5 = r"not a readable HDF5 file \(.+\)"
CRC = r"checksum mismatch .*corrupt"
TRUNC_DATA = r"claims bytes \[\d+, \d+\) but the file is only \d+ bytes"
SPECIAL = (r"is a (FIFO \(named pipe\)|character device|socket|directory|block device), expected"
           r"|not a Keras HDF5 file nor a TensorFlow checkpoint")
OUT_IS_IN = r"output is the input .*refusing to overwrite an input"

#: The expected outcome of every corpus case.  (Root-dependent cases are resolved in
#: :func:`expected_for` from what the generator observed.)
EXPECTED: dict = {
    # generic
    "gen_empty_file": E3(r"file is empty"),
    "gen_empty_directory": E3(r"directory holds no TensorFlow checkpoint"),
    "gen_missing_file": E3(r"no such file or directory"),
    "gen_unreadable_file": E3(r"cannot be read \(Permission denied\)"),
    "gen_png_named_h5": E3(NOT_MODEL),
    "gen_text_named_h5": E3(NOT_MODEL),
    "gen_zip_named_keras": E3(r"zip archive has no end-of-central-directory record"),  # keras3 reader
    "gen_garbage_index": E3(r"not a .*TensorFlow checkpoint|not a TensorFlow checkpoint index"),
    "gen_text_index": E3(r"not a .*TensorFlow checkpoint|not a TensorFlow checkpoint index"),
    # Keras HDF5: truncation (below 8 bytes the HDF5 signature itself is gone)
    "h5_truncated_at_4": E3(NOT_MODEL),
    **{f"h5_truncated_at_{n}": E3(NOT_HDF5) for n in (8, 64, 512, 1024, 2048, 4096, 10288, 20476, 20575)},
    # header bit flips
    "h5_flip_superblock_version": E3(NOT_HDF5),
    "h5_flip_superblock_offset_size": E3(NOT_HDF5),
    "h5_flip_root_header_address": E3(NOT_HDF5),
    "h5_flip_signature_tree": E3(r"/model_weights cannot be read \(.*B-tree signature\)"),
    "h5_flip_signature_heap": E3(r"/model_weights cannot be read \(.*local heap signature\)"),
    "h5_flip_signature_snod": E3(r"/model_weights cannot be read \(.*symbol table node signature\)"),
    "h5_flip_signature_gcol": E3(r"attribute 'model_config' of / cannot be read \(.*global heap"),
    "h5_flip_model_config_json": E3(r"attribute 'model_config' is not valid JSON"),
    "h5_flip_weight_data": Expect(0),  # documented: HDF5 has no checksum over contiguous data
    # structure
    "h5_no_model_config_no_weights": E3(r"neither a Keras 'model_config' nor Keras weights"),
    "h5_model_config_not_json": E3(r"attribute 'model_config' is not valid JSON"),
    "h5_model_config_json_list": E3(r"model_config is not a Keras model \(no class_name\)"),
    "h5_model_config_json_no_class": E3(r"model_config is not a Keras model \(no class_name\)"),
    "h5_model_config_layer_not_object": E3(r"model_config has a layer entry that is not an object: 42"),
    "h5_missing_model_weights": E3(r"/model_weights is missing"),
    "h5_missing_weight_dataset": E3(r"/model_weights/cu_dnngru/cu_dnngru/recurrent_kernel:0 is missing"),
    "h5_weight_names_incomplete": E3(r"weights recurrent_kernel of CuDNNGRU 'cu_dnngru' not found"),
    "h5_layer_group_missing": E3(r"/model_weights/cu_dnngru_1 is missing"),
    "h5_weight_is_a_group": E3(r"/model_weights/cu_dnngru/cu_dnngru/bias:0 is not a dataset"),
    "h5_duplicate_layer_names": E3(r"attribute 'layer_names' lists 'cu_dnngru' twice"),
    "h5_weight_names_not_strings": E3(r"attribute 'weight_names' .*(is not a list of strings|expected text)"),
    # shapes and dtypes
    "h5_units_disagree_with_weights": E3(r"CuDNNGRU cu_dnngru: config says units=9, weights have 8"),
    "h5_kernel_vs_recurrent_kernel": E3(r"recurrent_kernel has shape \(7, 21\), expected \(8, 24\)"),
    "h5_kernel_not_3h": E3(r"kernel has shape \(6, 23\), expected \(input_size, 3\*units\)"),
    "h5_kernel_3d": E3(r"kernel has shape \(2, 3, 24\), expected \(input_size, 3\*units\)"),
    "h5_bias_wrong_length": E3(r"bias has shape \(47,\), expected \(48,\)"),
    "h5_layer_sizes_disagree": E3(r"cu_dnngru_1.*\(8, 15\).*\(7, 15\)"),
    "h5_int_weights": E3(r"weights have dtype int32, expected a float type"),
    "h5_mixed_dtypes": E3(r"weights have mixed dtypes \['float32', 'float64'\]"),
    "h5_string_weights": E3(r"bias:0 has dtype \|S1, expected a numeric tensor"),
    "h5_nan_inf_weights": Expect(0, warning=r"cu_dnngru: 3 NaN/Inf weight value\(s\) carried over unchanged"),
    "h5_nan_inf_weights_verify": Expect(1, r"parity FAIL, .* NaN/Inf value\(s\) among the outputs: never a pass",
                                        stdout=r"NaN/Inf value\(s\) among the outputs: never a pass"),
    # allocation bombs
    "h5_kernel_claims_terabytes": E3(r"kernel:0 claims 26388279066624 bytes .*refused"),
    "h5_sparse_gigabytes_gru": E3(r"declares \d+ bytes .* but the file stores only 0 bytes"),
    "h5_dense_claims_terabytes": E3(r"/model_weights/dense/dense/kernel:0 claims \d+ bytes"),
    # links and foreign storage
    "h5_external_link_weight": E3(r"kernel:0 is an HDF5 external link; links are not followed"),
    "h5_soft_link_weight": E3(r"kernel:0 is an HDF5 soft link; links are not followed"),
    "h5_soft_link_model_weights": E3(r"/model_weights is an HDF5 soft link; links are not followed"),
    "h5_external_link_layer_group": E3(r"/model_weights/dense is an HDF5 external link"),
    "h5_external_storage_dataset": E3(r"keeps its data in external file\(s\) .*; refused"),
    "h5_virtual_dataset": E3(r"is a virtual dataset .*refused"),
    # code and unknown classes
    "h5_lambda_marshal_code": E3(r"Lambda layer\(s\) evil_lambda holding Python code; gruconv never runs it, and a .keras model cannot be built"),
    "h5_lambda_marshal_code_weights": Expect(0),
    "h5_lambda_marshal_code_verify": E3(r"Lambda.*(safe_mode|Python code)"),
    "h5_lambda_marshal_code_inspect": Expect(0, stdout=r"Lambda layers \(refused by convert\): evil_lambda"),
    # issue 29: a class that is not Keras's own is a user's custom layer, carried over as Keras 3 writes one
    # (module None: nothing is ever imported by name, so the "os" module of the next case never is either)
    "h5_unknown_custom_layer": Expect(0, warning=r"custom layer class MyAttention \(my_attention\) carried over "
                                                 r"as it is.*custom_objects=\{\"MyAttention\": <your Keras 3 class>\}"),
    "h5_custom_object_module_os": Expect(0, warning=r"custom layer class system \(sys\) carried over as it is"),
    # issue 45 item 6: Keras's own namespace function as a class, a config holding code: refused, not carried
    "h5_deserialize_lambda": E3(r"Lambda layer\(s\) evil_deser/evil_lambda holding Python code; gruconv never runs"),
    "h5_deserialize_lambda_verify": E3(r"layer 'sequential/evil_deser' \(deserialize\): its config holds Lambda "
                                       r"layer\(s\) sequential/evil_deser/evil_lambda holding Python code"),
    "h5_deserialize_tfsmlayer": E3(r"loading it from outside the file: evil_deser/tfsm \(TFSMLayer: a SavedModel "
                                   r"loaded from its filepath\); gruconv never runs it"),
    "h5_tfsmlayer": E3(r"loading it from outside the file: tfsm \(TFSMLayer"),
    "h5_custom_layer_holding_lambda": E3(r"Lambda layer\(s\) my_wrapper/evil_lambda holding Python code"),
    # valid inputs
    "h5_attrs_as_bytes": Expect(0),
    "h5_attrs_as_str": Expect(0),
    # TF1: index and data damage
    "tf1_index_truncated_at_0": E3(r"index file is empty \(0 bytes\)"),
    "tf1_index_truncated_at_1": E3(r"shorter than the 48-byte SSTable footer"),
    "tf1_index_truncated_at_20": E3(r"shorter than the 48-byte SSTable footer"),
    "tf1_index_truncated_at_546": E3(r"footer magic is 0x[0-9a-f]+, expected 0xdb4775248b80fb57"),
    "tf1_index_truncated_at_1045": E3(r"footer magic is 0x[0-9a-f]+, expected 0xdb4775248b80fb57"),
    "tf1_index_truncated_at_1092": E3(r"footer magic is 0x[0-9a-f]+, expected 0xdb4775248b80fb57"),
    **{f"tf1_data_truncated_at_{n}": E3(TRUNC_DATA) for n in (0, 1504, 2000, 11471)},
    "tf1_index_flip_table_entry": E3(r"data block .*block checksum mismatch"),
    "tf1_index_flip_block_trailer_crc": E3(r"index block .*block checksum mismatch"),
    "tf1_index_flip_footer_magic": E3(r"footer magic is 0xdb4771248b80fb57"),
    "tf1_data_flip_opaque": E3(r"tensor 'rnn/cudnn_gru/opaque_kernel': " + CRC),
    "tf1_data_flip_canonical_gates_kernel": E3(r"cell_0/cudnn_compatible_gru_cell/gates/kernel': " + CRC),
    "tf1_missing_data_shard": E3(r"data shard 0 of 1 is missing"),
    "tf1_sharded_missing_shard": E3(r"data shard 1 of 2 is missing"),
    "tf1_checkpoint_file_points_nowhere": E3(r"model_checkpoint_path names 'gone/model.ckpt-1000', but .* does not exist"),
    "tf1_checkpoint_file_garbage": E3(r"is not UTF-8 text"),
    "tf1_opaque_claims_terabytes": E3(r"opaque_kernel.*(claims|4398046511104|file is only)"),
    # TF1: shapes, hints, dtypes
    "tf1_opaque_size_fits_no_gru": E3(r"has 295 values, which fits no cuDNN GRU shape"),
    "tf1_hints_contradict_buffer": Expect(2, r"294 .*num_units=9"),
    "tf1_hints_contradict_canonical": Expect(2, r"num_units=8 \(stored: 7\) contradict its canonical tensors"),
    "tf1_canonical_missing_piece": E3(r"cell_1/cudnn_compatible_gru_cell/'?candidate/hidden_projection/bias'? is missing"),
    "tf1_canonical_missing_layer": E3(r"cell_1|layer 1|2 layers|missing"),
    "tf1_canonical_int_dtype": E3(r"gates/kernel' has dtype int32"),
    "tf1_canonical_mixed_dtype": E3(r"gates/bias' has float64"),
    "tf1_canonical_wrong_shape": E3(r"gates/kernel' has shape \[14, 12\], expected \[12, 14\]"),
    "tf1_opaque_int_dtype": E3(r"'encoder/cudnn_params' is dtype int32 .*1-D float16/32/64 tensor"),
    "tf1_opaque_2d": E3(r"'encoder/cudnn_params' is dtype float32 and shape \[42, 7\]"),
    "tf1_nan_inf_weights": Expect(0, warning=r"rnn/cudnn_gru: 2 NaN/Inf weight value\(s\)"),
    # outputs
    "out_readonly_directory": E3(r"output directory .* is not writable", names="output"),
    "out_parent_missing": E3(r"output directory .* does not exist", names="output"),
    "out_exists_no_force": E3(r"output exists; pass --force to overwrite it", names="output"),
    "out_is_directory": E3(r"output path is a directory", names="output"),
    "out_unknown_extension": Expect(2, r"cannot tell the output format from 'model.txt'", names="any"),
    # batch mirroring: outputs stay inside --out-dir
    "batch_dotdot_input": Expect(0),
    "batch_absolute_input": Expect(0),
    "batch_dotdot_in_name": Expect(0),
    # --- gruconv.files.inputs: special files (never opened, never blocking), sizes, escapes (x_*) ---
    "x_fifo_input": E3(SPECIAL),
    "x_fifo_input_inspect": E3(SPECIAL),
    "x_dev_null_input": E3(SPECIAL + r"|file is empty"),
    "x_dev_zero_input_inspect": E3(SPECIAL),
    "x_directory_named_h5": E3(r"directory holds no TensorFlow checkpoint|is a directory"),
    "x_symlink_to_regular_model": Expect(0),
    "x_symlink_to_fifo": E3(SPECIAL),
    "x_symlink_loop": E3(r"too many levels of symbolic links|no such file or directory"),
    "x_dangling_symlink_input": E3(r"no such file or directory"),
    "x_tf1_data_shard_fifo": E3(r"is a FIFO \(named pipe\), expected a checkpoint data shard"),
    "x_tf1_data_shard_fifo_inspect": E3(r"is a FIFO \(named pipe\), expected a checkpoint data shard"),
    "x_tf1_data_shard_directory": E3(r"is a directory, expected a checkpoint data shard"),
    "x_tf1_data_shard_dev_zero": E3(r"is a character device, expected a checkpoint data shard"),
    "x_tf1_data_shard_dangling": E3(r"data shard 0 of 1 is missing"),
    "x_tf1_index_fifo": E3(r"no \*\.index file|does not exist|not a TensorFlow checkpoint"),
    "x_tf1_state_file_fifo": Expect(0),
    "x_tf1_sparse_2gb_index": E3(r"is 2147483653 bytes, over the 256 MiB limit; refused \(set GRUCONV_MAX_BYTES"),
    "x_tf1_state_file_over_1mib": E3(r"over the 1 MiB limit; refused \(set GRUCONV_MAX_BYTES"),
    "x_tf1_index_over_env_limit": E3(r"over the 500 bytes limit; refused \(set GRUCONV_MAX_BYTES"),
    "x_env_limit_not_a_number": Expect(2, r"GRUCONV_MAX_BYTES='lots' is not a byte count", names="none"),
    "x_tf1_tensor_over_env_limit": E3(r"extra/embedding' is 6291456 bytes, over the 4 MiB limit"),
    "x_h5_many_small_shape_bombs": E3(r"datasets declare \d+ bytes more than the file stores"),
    "x_h5_model_config_200k_nested": E3(r"attribute 'model_config' is nested 200000 levels deep"),
    "x_h5_model_config_200k_nested_inspect": E3(r"attribute 'model_config' is nested 200000 levels deep"),
    "x_config_200k_nested": E3(r"is nested 200000 levels deep", names="none"),
    "x_config_over_16mib": E3(r"over the 16 MiB limit", names="none"),
    "x_config_fifo": E3(SPECIAL, names="none"),
    "x_config_directory": E3(r"is a directory", names="none"),
    "x_tf1_state_dotdot": E3(r"points outside the checkpoint's directory; refused; pass the checkpoint prefix"),
    "x_tf1_state_absolute_outside": E3(r"is outside the checkpoint's directory .*pass the checkpoint prefix"),
    "x_tf1_state_absolute_inside": Expect(0),
    "x_tf1_state_absolute_moved_beside": Expect(0),
    "x_tf1_state_symlinked_subdir_outside": E3(r"points outside the checkpoint's directory"),
    "x_tf1_state_path_control_chars": E3(r"model_checkpoint_path names 'gone\\n\\x1b\[31mred'"),
    "x_out_is_input": E3(OUT_IS_IN, names="none"),
    "x_out_is_input_dotdot": E3(OUT_IS_IN, names="none"),
    "x_out_is_input_hardlink": E3(OUT_IS_IN, names="none"),
    "x_out_is_input_symlink": E3(OUT_IS_IN, names="none"),
    "x_out_is_tf1_index": E3(OUT_IS_IN, names="none"),
    "x_out_is_tf1_data_shard": E3(OUT_IS_IN, names="none"),
    "x_out_dangling_symlink": E3(r"output is a dangling symbolic link", names="none"),
    "x_input_name_newline_missing": E3(r"no\\nsuch\.h5: no such file or directory", names="none"),
    "x_input_name_escape_sequence": E3(r"\\x1b\[31mred\.h5: not a Keras HDF5 file", names="none"),
    "x_output_name_newline": E3(r"no\\ndir", names="none"),
    "x_verify_inputs_npz_header_claims_huge": E3(r"declares shape \(1099511627776,\)", names="none"),
    "x_verify_inputs_npz_deflate_bomb": E3(r"over 1000:1, a zip bomb", names="none"),
    "x_verify_inputs_npz_pickle": E3(r"Python objects|allow_pickle|object", names="none"),
    "x_verify_inputs_fifo": E3(SPECIAL, names="none"),
    "x_batch_out_dir_is_input_dir": E3(OUT_IS_IN, names="none"),
    "x_batch_report_is_input": E3(OUT_IS_IN, names="none"),
    "x_batch_junit_is_input_hardlink": E3(OUT_IS_IN, names="none"),
    "x_batch_glob_symlink_loops_and_fifo": Expect(0),
    "x_batch_walk_symlink_loops_and_fifo": Expect(0),
}

#: Bugs outside this suite's files (see the module docstring).  Each entry: case -> what is wrong.
_CHECK_OUTPUTS = "api.convert must call outputs.check_outputs(outputs, inputs) before any work"
_DISPLAY = "errors.GruconvError.__str__ must escape control characters with inputs.display"
PENDING: dict = {}

#: Run through the installed console script (real process, real stderr).
SUBPROCESS = {
    "gen_empty_file", "gen_missing_file", "h5_truncated_at_512", "h5_kernel_claims_terabytes",
    "h5_lambda_marshal_code", "h5_unknown_custom_layer", "h5_nan_inf_weights", "tf1_data_flip_opaque",
    "h5_deserialize_lambda",
    "out_exists_no_force", "out_unknown_extension",
}

#: Temporary names gruconv uses beside an output (outputs.atomic_path, api's .gruconv-* directory).
TEMP = re.compile(r"^\..+\.tmp|^\.gruconv-")
FORBIDDEN = re.compile(r"Traceback|\b\w+(Error|Exception|Warning):|^\s+File \"", re.M)


def expected_for(case: Case) -> Expect:
    e = EXPECTED[case.name]
    if case.name == "gen_unreadable_file" and not case.blocked:
        return Expect(0)  # root reads a chmod-000 file: it converts (documented in the case note)
    if case.name == "out_readonly_directory" and not case.blocked:
        return Expect(0)  # root writes into a chmod-555 directory
    return e


# --------------------------------------------------------------------------- corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("bad")
    cases = make_corpus(d / "corpus")
    yield {c.name: c for c in cases}
    # chmod'ed entries must not make tmp cleanup fail
    for p in (d / "corpus" / "gen" / "unreadable.h5", d / "corpus" / "out" / "readonly"):
        if p.exists():
            os.chmod(p, 0o755)


def _case_names() -> dict:
    """{case name: whether it runs as a ``limited`` child} of a throw-away corpus."""
    import tempfile

    with tempfile.TemporaryDirectory() as td:
        names = {c.name: c.limited for c in make_corpus(Path(td) / "c")}
        for p in (Path(td) / "c" / "gen" / "unreadable.h5", Path(td) / "c" / "out" / "readonly"):
            os.chmod(p, 0o755)
    return names


_LIMITED = _case_names()
CASE_NAMES = list(_LIMITED)

#: Tiers (docs/testing.md).  In-process cases (CliRunner) run in ``make test``.  A case that starts a
#: process (``SUBPROCESS``, or ``limited``: RLIMIT_AS + timeout) pays an interpreter start and often a
#: TensorFlow import, so it is marked ``slow`` (``make test-all``) except this sample, one per kind
#: of risk: early refusals through the real entry point's exit code, an existing output kept, a FIFO
#: (hang), /dev/zero (endless read), a symlink loop.
FAST_CHILD_CASES = {"gen_empty_file", "gen_missing_file", "out_exists_no_force",
                    "x_fifo_input", "x_dev_zero_input_inspect", "x_symlink_loop"}


def _tiered(name: str):
    child = _LIMITED[name] or name in SUBPROCESS
    return pytest.param(name, marks=pytest.mark.slow) if child and name not in FAST_CHILD_CASES else name


def test_corpus_is_large_and_every_case_has_an_expectation():
    assert len(CASE_NAMES) >= 40
    assert len(set(CASE_NAMES)) == len(CASE_NAMES)
    assert set(CASE_NAMES) == set(EXPECTED), (set(CASE_NAMES) ^ set(EXPECTED))
    assert FAST_CHILD_CASES <= set(CASE_NAMES), FAST_CHILD_CASES - set(CASE_NAMES)
    assert set(PENDING) <= set(EXPECTED) and SUBPROCESS <= set(EXPECTED)


@pytest.mark.slow  # rebuilds the whole corpus in a child process; the fixture already builds it in-process
def test_make_bad_inputs_script(tmp_path):
    r = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "make_bad_inputs.py"), str(tmp_path / "c")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"{len(CASE_NAMES)} cases in" in r.stdout
    for p in (tmp_path / "c" / "gen" / "unreadable.h5", tmp_path / "c" / "out" / "readonly"):
        os.chmod(p, 0o755)


# --------------------------------------------------------------------------- helpers


def _digest(path: Path):
    """SHA-256 of a file, of every file under a directory, or None if absent; for unreadable
    files, (size, mtime) — reading them is exactly what we cannot do; FIFOs, devices and
    symlinks by what they are (never opened: a FIFO would block)."""
    import stat as st_

    if not os.path.lexists(path):
        return None
    st = os.lstat(path)
    if st_.S_ISLNK(st.st_mode):
        target = Path(os.path.realpath(path))          # never raises, even for a loop
        ok = os.path.lexists(target) and not st_.S_ISLNK(os.lstat(target).st_mode) and not target.is_dir()
        return ("link", os.readlink(path), _digest(target) if ok else None)
    if st_.S_ISDIR(st.st_mode):
        return {p.name: _digest(p) for p in sorted(path.iterdir())}
    if not st_.S_ISREG(st.st_mode):
        return ("special", st_.S_IFMT(st.st_mode), st.st_ino)
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except PermissionError:
        return ("unreadable", st.st_size, st.st_mtime_ns)


def _listing(d: Path) -> set:
    return {str(p.relative_to(d)) for p in d.rglob("*")} if d.is_dir() else set()


#: Limits of a ``limited`` case's child process: address space and wall clock.
LIMIT_AS = int(float(os.environ.get("GRUCONV_BAD_INPUT_AS_GB", "3")) * 2**30)
LIMIT_S = float(os.environ.get("GRUCONV_BAD_INPUT_TIMEOUT", "90"))


def _limits() -> None:  # in the child, before exec
    import resource

    os.setsid()
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))


def _run_limited(argv: list, cwd: Path, env: dict) -> tuple:
    """The console script as a child with ``RLIMIT_AS`` and a timeout; a hang is killed (its whole
    process group) and reported as exit -9 with a "HANG" stderr."""
    import signal

    p = subprocess.Popen([str(GRUCONV), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                         env=dict(os.environ, COLUMNS="200", **env), preexec_fn=_limits)
    try:
        out, err = p.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return -9, out, f"HANG: killed after {LIMIT_S:.0f} s\n{err}", None
    return p.returncode, out, err, None


def _run(argv: list, subprocess_: bool, cwd: Path, env: Optional[dict] = None, limited: bool = False) -> tuple:
    if limited:
        return _run_limited(argv, cwd, env or {})
    if subprocess_:
        env = dict(os.environ, COLUMNS="200", **(env or {}))
        r = subprocess.run([str(GRUCONV), *argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
        return r.returncode, r.stdout, r.stderr, None
    res = CliRunner().invoke(main, argv, catch_exceptions=True)
    exc = res.exception if res.exception is not None and not isinstance(res.exception, SystemExit) else None
    if exc is not None:
        import traceback

        exc = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return res.exit_code, res.stdout, res.stderr, exc


# --------------------------------------------------------------------------- the table, case by case


@pytest.mark.parametrize("name", [_tiered(n) for n in CASE_NAMES])
def test_bad_input(name, corpus, tmp_path):
    case: Case = corpus[name]
    for need in case.requires:
        if not HAVE[need]:
            pytest.skip(f"gruconv.{'readers.tf1' if need == 'tf1' else need} is not available")
    exp = expected_for(case)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    precious = b"an earlier conversion the user wants to keep\n"
    output: Optional[Path] = out_dir / "model.keras"
    if case.output == "readonly_dir":
        output = case.outputs_dir / f"{name}.keras"
        watch = case.outputs_dir
    else:
        watch = out_dir
    if case.output == "missing_parent":
        output = out_dir / "no_such_dir" / "model.keras"
    elif case.output == "exists":
        output.write_bytes(precious)
    elif case.output == "is_dir":
        output.mkdir()
    elif case.output == "bad_ext":
        output = out_dir / "model.txt"
    elif case.output in ("none", "out_dir"):
        output = None
    before_listing = _listing(watch)

    if case.argv is not None:
        argv = [a.replace("{out}", str(output)).replace("{outdir}", str(out_dir)) for a in case.argv]
        output = None
    elif case.command == "convert" and case.output == "out_dir":
        argv = ["convert", str(case.input), "--out-dir", str(out_dir), "--jobs", "1", *case.extra]
    elif case.command == "convert":
        argv = ["convert", str(case.input), str(output), *case.extra]
    else:
        argv = [case.command, str(case.input), *case.extra]
    # argv cases write beside their inputs: nothing may appear there on failure either
    side = Path(str(case.input).split("*")[0]).parent if case.argv is not None else None
    side_before = _listing(side) if side is not None else set()

    watched = [case.input, *case.watch]
    before = [_digest(p) for p in watched]
    code, stdout, stderr, exc = _run(argv, name in SUBPROCESS, tmp_path, case.env, case.limited)
    after = [_digest(p) for p in watched]
    try:
        # 1. never a crash
        assert exc is None, f"{name}: uncaught exception (a bug):\n{exc}"
        assert not FORBIDDEN.search(stderr), f"{name}: traceback or exception class on stderr:\n{stderr}"
        # 2. never runs code
        if case.marker is not None:
            assert not case.marker.exists(), f"{name}: code from the model file RAN (marker {case.marker})"
        # 3. the input is untouched
        assert after == before, f"{name}: the input changed"
        # 4. outputs: nothing left on failure; old output intact; no temp files
        created = _listing(watch) - before_listing
        if case.output == "exists":
            assert output.read_bytes() == precious, f"{name}: the existing output was modified"
        assert not stderr.startswith("HANG"), f"{name}: {stderr[:300]}"
        assert code >= 0, f"{name}: killed by signal {-code} (memory limit?): {stderr[-500:]}"
        if side is not None and code != 0:
            left = _listing(side) - side_before
            assert not left, f"{name}: files left beside the inputs after a failure: {sorted(left)}"
        if code != 0:
            assert not created, f"{name}: files left behind after a failure: {sorted(created)}"
        else:
            leftovers = [c for c in created if TEMP.match(Path(c).name)]
            assert not leftovers, f"{name}: temporary files left behind: {leftovers}"
            if case.output == "out_dir":
                assert created, f"{name}: batch wrote nothing"
                for c in created:
                    assert (watch / c).resolve().is_relative_to(watch.resolve())
            elif case.command == "convert" and output is not None:
                assert output.is_file() or "nothing to convert" in stdout, f"{name}: no output written"
        # 5. exit code and the one stderr line
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        pending = PENDING.get(name)
        outcome_ok = code == exp.code
        if code != 0:
            assert len(lines) == 1, f"{name}: expected one stderr line, got:\n{stderr}"
            line = lines[0]
            assert line.startswith("gruconv: error: "), line
            if exp.code != 0:
                outcome_ok = outcome_ok and bool(re.search(exp.message, line))
                named = {"input": [str(case.input)], "output": [str(output)],
                         "any": [str(case.input), str(output)], "none": [""]}[exp.names]
                outcome_ok = outcome_ok and any(n in line for n in named)
            assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", line), f"{name}: control character on stderr: {line!r}"
        else:
            errors = [ln for ln in lines if not ln.startswith("gruconv: warning: ")]
            if case.output == "out_dir":  # batch mode reports progress per input on stderr
                errors = [ln for ln in errors if not ln.startswith("ok ")]
            assert not errors, f"{name}: exit 0 but stderr has non-warning lines:\n{stderr}"
            if exp.warning:
                outcome_ok = outcome_ok and any(re.search(exp.warning, ln) for ln in lines)
            if name == "tf1_nan_inf_weights":  # identical NaN/Inf in buffer and canonical tensors agree
                outcome_ok = outcome_ok and not any("disagrees" in ln for ln in lines)
            if exp.stdout:
                outcome_ok = outcome_ok and bool(re.search(exp.stdout, stdout))
        if pending:
            if outcome_ok:
                pytest.fail(f"{name}: fixed ({pending}): remove it from PENDING")
            pytest.xfail(f"{pending}; got exit {code}: {stderr.strip()[:300]}")
        assert outcome_ok, (f"{name}: expected exit {exp.code} matching {exp.message or exp.warning or exp.stdout!r}"
                            f"\n got exit {code}\n stderr: {stderr}\n stdout: {stdout[-2000:]}")
    finally:
        if case.output == "readonly_dir" and output is not None and output.exists():
            output.unlink()


# --------------------------------------------------------------------------- a few more angles


def test_existing_output_is_replaced_only_with_force(corpus, tmp_path):
    out = tmp_path / "model.keras"
    out.write_bytes(b"old")
    code, _, stderr, exc = _run(["convert", str(corpus["h5_kernel_3d"].input), str(out), "--force"], False, tmp_path)
    assert exc is None and code == 3 and out.read_bytes() == b"old", stderr   # failure with --force: old kept
    code, _, stderr, exc = _run(["convert", str(Path(corpus["out_exists_no_force"].input)), str(out), "--force"],
                                False, tmp_path)
    assert exc is None and code == 0, stderr
    assert out.read_bytes()[:2] == b"PK"                                          # a .keras zip now
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.keras"]


def test_inspect_never_writes_and_never_imports_keras(corpus, tmp_path):
    """``inspect`` of every bad Keras input: exit 0 or 3, one line, and no TensorFlow/Keras import."""
    names = [n for n in CASE_NAMES if n.startswith("h5_") and corpus[n].command == "convert"]
    script = (
        "import sys, json\n"
        "from gruconv import api\n"
        "from gruconv.errors import GruconvError\n"
        "out = {}\n"
        "for p in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        api.inspect(p); out[p] = 0\n"
        "    except GruconvError as e:\n"
        "        out[p] = e.exit_code\n"
        "heavy = [m for m in ('tensorflow', 'keras') if m in sys.modules]\n"
        "print(json.dumps({'codes': out, 'heavy': heavy}))\n"
    )
    import json

    paths = [str(corpus[n].input) for n in names]
    r = subprocess.run([sys.executable, "-c", script, json.dumps(paths)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["heavy"] == [], f"inspect imported {res['heavy']}"
    assert set(res["codes"].values()) <= {0, 3}
    assert not any(corpus[n].marker and corpus[n].marker.exists() for n in names)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- permissions, for real

SETPRIV = shutil.which("setpriv")


@pytest.mark.slow  # a console-script child per case
@pytest.mark.skipif(not (IS_ROOT and SETPRIV), reason="needs root and setpriv to drop to an unprivileged user")
@pytest.mark.parametrize("what", ["unreadable_input", "unreadable_input_inspect", "unreadable_data_shard",
                                  "unreadable_checkpoint_dir", "readonly_output_dir"])
def test_permission_cases_as_an_unprivileged_user(what):
    """As root, chmod does not stop reads or writes (the corpus marks those cases accordingly); here the
    command runs as ``nobody`` (setpriv), so the permission really blocks it."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="gruconv-perm-", dir="/tmp"))
    try:
        os.chmod(d, 0o755)
        src = d / "model.h5"
        shutil.copyfile(FIXTURE_SEQ, src)
        out_dir = d / "out"
        out_dir.mkdir()
        os.chmod(out_dir, 0o777)
        out = out_dir / "model.keras"
        cmd, expect, names = "convert", r"cannot be read \(Permission denied\)", src
        if what.startswith("unreadable_input"):
            os.chmod(src, 0)
            if what.endswith("inspect"):
                cmd = "inspect"
            inp = src
        elif what == "unreadable_data_shard":
            inp = d / "ckpt"
            shutil.copytree(ROOT_DIR / "fixtures" / "tf1" / "layer_uni", inp)
            os.chmod(inp / "model.ckpt.data-00000-of-00001", 0)
            expect, names = r"Permission denied", inp
        elif what == "unreadable_checkpoint_dir":
            inp = d / "ckpt"
            shutil.copytree(ROOT_DIR / "fixtures" / "tf1" / "layer_uni", inp)
            os.chmod(inp, 0)
            expect, names = r"Permission denied|cannot (be read|list)", inp
        else:
            inp = src
            os.chmod(out_dir, 0o555)
            expect, names = r"output directory .* is not writable", out
        argv = [str(GRUCONV), cmd, str(inp)] + ([str(out)] if cmd == "convert" else [])
        before = _digest(inp)
        r = subprocess.run([SETPRIV, "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
                           capture_output=True, text=True, timeout=300, cwd=d, env=dict(os.environ, HOME=str(d)))
        assert _digest(inp) == before
        assert not FORBIDDEN.search(r.stderr), r.stderr
        assert _listing(out_dir) == set(), _listing(out_dir)
        lines = r.stderr.strip().splitlines()
        ok = (r.returncode == 3 and len(lines) == 1 and lines[0].startswith("gruconv: error: ")
              and str(names) in lines[0] and re.search(expect, lines[0]))
        if not ok and "Error: Invalid value for" in r.stderr:
            pytest.xfail("cli.py: click.Path(readable=True) answers an unreadable input itself: exit 2, "
                         f"three lines ({r.stderr.strip()[-200:]!r})")
        assert ok, f"exit {r.returncode}: {r.stderr}"
    finally:
        for p in [d, *d.rglob("*")]:
            with contextlib.suppress(OSError):
                os.chmod(p, 0o755)
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow  # converts every corpus input through worker processes
@pytest.mark.skipif(not HAVE["batch"], reason="gruconv.batch is not available")
def test_batch_over_the_whole_corpus_keeps_going_without_a_crash(corpus, tmp_path):
    """``--out-dir`` over every Keras and TF1 corpus input: each failure is one record, nothing crashes,
    only complete outputs appear, all inside the output directory."""
    root = next(iter(corpus.values())).input
    while root.name != "corpus":
        root = root.parent
    out = tmp_path / "converted"
    argv = ["convert", str(root / "h5"), str(root / "tf1"), "--out-dir", str(out), "--keep-going", "--jobs", "2"]
    code, stdout, stderr, exc = _run(argv, True, tmp_path)
    assert exc is None
    assert code == 3, stderr
    assert not FORBIDDEN.search(stderr), stderr
    from gruconv.batch import STATE_FILE

    made = sorted(p for p in out.rglob("*") if p.is_file() and p.name != STATE_FILE)
    assert made, "nothing converted"
    for p in made:
        assert p.resolve().is_relative_to(out.resolve())
        assert not TEMP.match(p.name), p
        assert p.suffix in (".keras", ".npz", ".h5"), p
    assert not any(c.marker and c.marker.exists() for c in corpus.values())
