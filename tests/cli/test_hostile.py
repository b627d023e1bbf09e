"""Hostile use of the real CLI: every case runs ``.venv/bin/gruconv`` in a child process and checks the contract.

The contract, for every case (see :func:`hostile_cases.check_contract`):

* a defined exit code — 2 usage, 3 input/output problem, 1 parity failure, 0 only where the
  operation is legitimately fine (each case lists what it accepts);
* on failure exactly ONE stderr line starting ``gruconv: error:`` (batch mode: one record line
  per input), no traceback, no raw control characters (a hostile file name must be escaped);
* every pre-existing file, link, FIFO and directory under the work directory unchanged
  (inputs byte-identical, links still links, devices still devices);
* nothing written outside the named outputs, nothing at all left behind after a failure,
  never a temporary ``.NAME.*.tmp*`` / ``.gruconv-*`` file, nothing left in ``$TMPDIR``;
* bounded memory and time: the child runs under ``RLIMIT_DATA`` 3 GiB (heap + private writable
  mappings; a plain convert peaks at ~0.7 GB RSS) and ``RLIMIT_AS`` 8 GiB (TensorFlow's import needs
  ~2 GiB of address space, a memory-mapped 2 GB shard needs 2 more) and is killed after a timeout (a
  hang fails the case, it never hangs the suite; 120 s, 60 s for the "hang" class).

Everything happens in ``tmp_path`` (fixtures are copied there first, cwd is there); the few
cases that run as ``nobody`` (root only, via ``setpriv``) use a world-readable ``/tmp`` directory
instead, because pytest's base temp directory is private.

Cases are grouped by class (the first word of each table entry): ``destroy`` (inputs overwritten),
``hang``, ``memory``, ``traceback``, ``outside`` (reads outside what was named), ``names``
(``OUT.rest.npz`` member names), ``messages``, ``batch``, ``own``.  Nothing is skipped or
xfailed: a failing case is a bug to fix in ``src/``.  ``GRUCONV_HOSTILE_REPORT=FILE`` writes a
JSON summary of every case (outcome, exit code, first stderr line, problems).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import tempfile
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest

from hostile_cases import (
    HANG_TIMEOUT, HOSTILE_NAMES, IS_ROOT, SETPRIV, TIMEOUT, Spec, check_contract, copy_fixture, fifo,
    h5_gzip_bomb, npz_deflate_bomb, npz_header_claims_huge, npz_pickle_bait, npz_write, npy_bytes, run_cli,
    snapshot, sparse_file, tf1_with_names, unsafe_member_names, zip_members,
)

SEQ = "keras/sequential.h5"              # Sequential: Input (None, None, 6) -> CuDNNGRU(8) -> CuDNNGRU(5) -> ...
WO = "keras/weights_only.h5"             # save_weights() file
WOJ = "keras/weights_only.json"          # its architecture (model.to_json())
TD = "keras/time_distributed.h5"         # Input (None, None) int -> Embedding(20, 6) -> CuDNNGRU -> TimeDistributed
UNI = "tf1/layer_uni"                    # TF1 CudnnGRU layer, 2 layers, 'checkpoint' + model.ckpt.{index,data}
E = {2, 3}
GIB = 2**30

CASES: dict = {}


def case(cls: str, *, hang: bool = False, user: str | None = None):
    def deco(fn):
        CASES[fn.__name__] = (cls, fn, {"hang": hang, "user": user})
        return fn
    return deco


def _state(d: Path, prefix: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "checkpoint").write_text(f'model_checkpoint_path: "{prefix}"\nall_model_checkpoint_paths: "{prefix}"\n')


def _only_keras_outputs(n: int = 1, under: str = "out"):
    def check(res, work):
        made = sorted(p for p in (work / under).rglob("*.keras")) if (work / under).is_dir() else []
        if res.code == 0 and len(made) != n:
            return [f"expected {n} .keras output(s) under {under}/, got {[str(p.relative_to(work)) for p in made][:6]}"]
        return []
    return check


# =========================================================================== destroy: inputs overwritten

@case("destroy")
def in_in_force_weights_only(w, ctx):
    copy_fixture(WO, w / "w.h5")
    return Spec(["convert", "w.h5", "w.h5", "--force"], E)


@case("destroy")
def in_in_force_model_named_keras(w, ctx):
    copy_fixture(SEQ, w / "m.keras")  # HDF5 content; format is detected from content
    return Spec(["convert", "m.keras", "m.keras", "--force"], E)


@case("destroy")
def in_in_force_relative_vs_absolute(w, ctx):
    copy_fixture(WO, w / "w.h5")
    return Spec(["convert", "w.h5", str(w / "w.h5"), "--force"], E)


@case("destroy")
def output_hardlink_to_input_force(w, ctx):
    copy_fixture(WO, w / "w.h5")
    os.link(w / "w.h5", w / "out.h5")
    return Spec(["convert", "w.h5", "out.h5", "--force"], {0, 2, 3}, changed_ok=("out.h5",),
                note="0 is fine if the rename replaced the name and w.h5's bytes are intact")


@case("destroy")
def output_symlink_to_input_force(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    os.symlink("m.h5", w / "out.keras")
    return Spec(["convert", "m.h5", "out.keras", "--force"], {0, 2, 3}, changed_ok=("out.keras",))


@case("destroy")
def output_symlink_to_input_weights_force(w, ctx):
    copy_fixture(WO, w / "w.h5")
    os.symlink("w.h5", w / "out.h5")
    return Spec(["convert", "w.h5", "out.h5", "--force"], {0, 2, 3}, changed_ok=("out.h5",))


@case("destroy")
def output_dotdot_is_input(w, ctx):
    copy_fixture(WO, w / "w.h5")
    (w / "sub").mkdir()
    return Spec(["convert", "w.h5", "sub/../w.h5", "--force"], E)


@case("destroy")
def output_through_symlinked_dir_is_input(w, ctx):
    copy_fixture(WO, w / "w.h5")
    os.symlink(".", w / "link")
    return Spec(["convert", "w.h5", "link/w.h5", "--force"], E)


@case("destroy")
def config_file_as_output(w, ctx):
    copy_fixture(WO, w / "w.h5")
    copy_fixture(WOJ, w / "arch.json")
    return Spec(["convert", "w.h5", "arch.json", "--config", "arch.json", "--format", "keras", "--force"], E)


@case("destroy")
def output_is_checkpoint_index(w, ctx):
    copy_fixture(UNI, w / "ckpt")
    return Spec(["convert", "ckpt", "ckpt/model.ckpt.index", "--format", "keras", "--force"], E)


@case("destroy")
def output_is_checkpoint_data_shard(w, ctx):
    copy_fixture(UNI, w / "ckpt")
    return Spec(["convert", "ckpt/model.ckpt", "ckpt/model.ckpt.data-00000-of-00001", "--format", "keras",
                 "--force"], E)


@case("destroy")
def batch_report_is_input(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["convert", "m.h5", "--out-dir", "out", "--report", "m.h5"], E, batch=True)


@case("destroy")
def batch_junit_is_input(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["convert", "m.h5", "--out-dir", "out", "--junit", "m.h5"], E, batch=True)


@case("destroy")
def batch_report_is_model_inside_input_dir(w, ctx):
    copy_fixture(SEQ, w / "models" / "a.h5")
    copy_fixture(WO, w / "models" / "w.h5")
    return Spec(["convert", "models", "--out-dir", "out", "--report", "models/w.h5"], E, batch=True)


@case("destroy")
def batch_report_is_checkpoint_index(w, ctx):
    copy_fixture(UNI, w / "models" / "ckpt")
    return Spec(["convert", "models", "--out-dir", "out", "--report", "models/ckpt/model.ckpt.index"], E,
                batch=True)


@case("destroy")
def batch_junit_is_config(w, ctx):
    copy_fixture(WO, w / "w.h5")
    copy_fixture(WOJ, w / "arch.json")
    return Spec(["convert", "w.h5", "--out-dir", "out", "--config", "arch.json", "--junit", "arch.json"], E,
                batch=True)


@case("destroy")
def verify_json_is_input(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--json", "m.h5"], E)


@case("destroy")
def verify_json_is_converted(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    shutil.copyfile(ctx.converted_seq(), w / "c.keras")
    return Spec(["verify", "m.h5", "c.keras", "--json", "c.keras"], E)


@case("destroy")
def verify_json_is_config(w, ctx):
    copy_fixture(WO, w / "w.h5")
    copy_fixture(WOJ, w / "arch.json")
    return Spec(["verify", "w.h5", "--config", "arch.json", "--json", "arch.json"], E)


@case("destroy")
def verify_json_is_checkpoint_index(w, ctx):
    copy_fixture(UNI, w / "ckpt")
    return Spec(["verify", "ckpt", "--json", "ckpt/model.ckpt.index"], E)


@case("destroy")
def batch_out_dir_is_input_dir_force(w, ctx):
    copy_fixture(WO, w / "models" / "w.h5")   # weights-only -> mirrored as models/w.h5: the input itself
    return Spec(["convert", "models", "--out-dir", "models", "--force"], E, batch=True)


@case("destroy")
def batch_out_dir_is_input_dir_via_symlink_force(w, ctx):
    copy_fixture(WO, w / "models" / "w.h5")
    os.symlink("models", w / "alias")
    return Spec(["convert", "models", "--out-dir", "alias", "--force"], E, batch=True)


@case("destroy")
def batch_out_dir_is_input_dir_file_arg_force(w, ctx):
    copy_fixture(WO, w / "w.h5")
    return Spec(["convert", "w.h5", "--out-dir", ".", "--force"], E, batch=True)


# =========================================================================== hang: FIFOs, devices, loops

def _uni_with(w: Path, member: str, make) -> Path:
    d = copy_fixture(UNI, w / "ckpt")
    (d / member).unlink()
    make(d / member)
    return d


@case("hang", hang=True)
def fifo_data_shard_convert(w, ctx):
    _uni_with(w, "model.ckpt.data-00000-of-00001", fifo)
    return Spec(["convert", "ckpt", "out.keras"], {3})


@case("hang", hang=True)
def fifo_data_shard_inspect(w, ctx):
    _uni_with(w, "model.ckpt.data-00000-of-00001", fifo)
    return Spec(["inspect", "ckpt"], {3})


@case("hang", hang=True)
def fifo_data_shard_verify(w, ctx):
    _uni_with(w, "model.ckpt.data-00000-of-00001", fifo)
    return Spec(["verify", "ckpt"], {3})


@case("hang", hang=True)
def fifo_index_file(w, ctx):
    _uni_with(w, "model.ckpt.index", fifo)
    return Spec(["convert", "ckpt", "out.keras"], {3})


@case("hang", hang=True)
def fifo_checkpoint_state_file(w, ctx):
    _uni_with(w, "checkpoint", fifo)
    return Spec(["convert", "ckpt", "out.keras"], {0, 3}, new_ok=("out.keras", "out.keras.rest.npz"))


@case("hang", hang=True)
def fifo_as_config(w, ctx):
    copy_fixture(WO, w / "w.h5")
    fifo(w / "arch.json")
    return Spec(["convert", "w.h5", "out.keras", "--config", "arch.json"], E)


@case("hang", hang=True)
def fifo_as_config_inspect(w, ctx):
    copy_fixture(WO, w / "w.h5")
    fifo(w / "arch.json")
    return Spec(["inspect", "w.h5", "--config", "arch.json"], E)


@case("hang", hang=True)
def fifo_as_input_convert(w, ctx):
    fifo(w / "m.h5")
    return Spec(["convert", "m.h5", "out.keras"], {3})


@case("hang", hang=True)
def fifo_as_input_inspect(w, ctx):
    fifo(w / "m.h5")
    return Spec(["inspect", "m.h5"], {3})


@case("hang", hang=True)
def fifo_as_input_verify(w, ctx):
    fifo(w / "m.h5")
    return Spec(["verify", "m.h5"], {3})


@case("hang", hang=True)
def fifo_as_verify_inputs(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    fifo(w / "x.npz")
    return Spec(["verify", "m.h5", "--inputs", "x.npz"], E)


@case("hang", hang=True)
def fifo_as_verify_converted(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    fifo(w / "c.keras")
    return Spec(["verify", "m.h5", "c.keras"], E)


@case("hang", hang=True)
def fifo_in_batch_directory(w, ctx):
    copy_fixture(SEQ, w / "models" / "a.h5")
    fifo(w / "models" / "pipe.h5")
    fifo(w / "models" / "pipe_noext")
    fifo(w / "models" / "sub" / "checkpoint")
    return Spec(["convert", "models", "--out-dir", "out"], {0}, new_ok=("out", "out/a.keras"), batch=True,
                must_exist=("out/a.keras",))


@case("hang", hang=True)
def fifo_named_in_batch(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    fifo(w / "pipe.h5")
    return Spec(["convert", "m.h5", "pipe.h5", "--out-dir", "out", "--keep-going"], {3},
                new_ok=("out", "out/m.keras"), partial_ok=True, batch=True)


@case("hang", hang=True)
def fifo_as_batch_out_dir(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    fifo(w / "out")
    return Spec(["convert", "m.h5", "--out-dir", "out"], E, batch=True)


@case("hang", hang=True)
def fifo_as_existing_output_force(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    fifo(w / "out.keras")
    return Spec(["convert", "m.h5", "out.keras", "--force"], {0, 2, 3}, changed_ok=("out.keras",))


@case("hang", hang=True)
def glob_over_symlink_loops(w, ctx):
    copy_fixture(SEQ, w / "d" / "a.h5")
    os.symlink(".", w / "d" / "l1")
    os.symlink(".", w / "d" / "l2")
    return Spec(["convert", "d/**", "--out-dir", "out"], {0}, new_ok=("out", "out/*"), batch=True,
                check=_only_keras_outputs(1))


@case("hang", hang=True)
def batch_dir_with_symlink_loops(w, ctx):
    copy_fixture(SEQ, w / "d" / "a.h5")
    os.symlink(".", w / "d" / "l1")
    os.symlink(".", w / "d" / "l2")
    return Spec(["convert", "d", "--out-dir", "out"], {0}, new_ok=("out", "out/*"), batch=True,
                check=_only_keras_outputs(1))


@case("hang", hang=True)
def dev_zero_as_input(w, ctx):
    return Spec(["convert", "/dev/zero", "out.keras"], {3})


@case("hang", hang=True)
def dev_zero_as_input_inspect(w, ctx):
    return Spec(["inspect", "/dev/zero"], {3})


@case("hang", hang=True)
def data_shard_symlink_to_dev_zero(w, ctx):
    _uni_with(w, "model.ckpt.data-00000-of-00001", lambda p: os.symlink("/dev/zero", p))
    return Spec(["convert", "ckpt", "out.keras"], {3})


@case("hang", hang=True)
def index_symlink_to_dev_zero(w, ctx):
    _uni_with(w, "model.ckpt.index", lambda p: os.symlink("/dev/zero", p))
    return Spec(["inspect", "ckpt"], {3})


@case("hang", hang=True)
def verify_inputs_dev_zero(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--inputs", "/dev/zero"], E)


# =========================================================================== memory

@case("memory")
def config_dev_zero(w, ctx):
    copy_fixture(WO, w / "w.h5")
    return Spec(["convert", "w.h5", "out.keras", "--config", "/dev/zero"], E)


@case("memory")
def config_dev_zero_inspect(w, ctx):
    copy_fixture(WO, w / "w.h5")
    return Spec(["inspect", "w.h5", "--config", "/dev/zero"], E)


@case("memory")
def config_sparse_2gb(w, ctx):
    copy_fixture(WO, w / "w.h5")
    sparse_file(w / "arch.json", 2 * GIB, b'{"class_name": "Sequential", "config": {"layers": [')
    return Spec(["convert", "w.h5", "out.keras", "--config", "arch.json"], E)


@case("memory")
def config_sparse_2gb_spaces(w, ctx):  # 2 GB of valid JSON whitespace around a real config
    copy_fixture(WO, w / "w.h5")
    real = (Path(__file__).resolve().parents[2] / "fixtures" / WOJ).read_bytes()
    with open(w / "arch.json", "wb") as f:
        f.write(b" " * 1024)
        f.seek(2 * GIB)
        f.write(real)
    return Spec(["convert", "w.h5", "out.keras", "--config", "arch.json"], E,
                note="a sparse 2 GB file: NUL bytes, then the real JSON")


@case("memory")
def h5_gzip_bomb_convert(w, ctx):
    shutil.copyfile(ctx.gzip_bomb(), w / "bomb.h5")
    return Spec(["convert", "bomb.h5", "out.keras"], {0, 3}, new_ok=("out.keras",),
                note="1.5 MB file, 1.2 GB of deflated zeros (10000-unit CuDNNGRU)")


@case("memory")
def h5_gzip_bomb_inspect(w, ctx):
    shutil.copyfile(ctx.gzip_bomb(), w / "bomb.h5")
    return Spec(["inspect", "bomb.h5"], {0, 3})


@case("memory")
def h5_gzip_bomb_verify(w, ctx):
    shutil.copyfile(ctx.gzip_bomb(), w / "bomb.h5")
    return Spec(["verify", "bomb.h5"], {0, 1, 3})


@case("memory")
def tf1_index_sparse_2gb(w, ctx):
    d = copy_fixture(UNI, w / "ckpt")
    os.truncate(d / "model.ckpt.index", 2 * GIB)
    return Spec(["convert", "ckpt", "out.keras"], {3})


@case("memory")
def tf1_index_sparse_2gb_inspect(w, ctx):
    d = copy_fixture(UNI, w / "ckpt")
    os.truncate(d / "model.ckpt.index", 2 * GIB)
    return Spec(["inspect", "ckpt"], {3})


@case("memory")
def tf1_data_shard_padded_to_2gb(w, ctx):
    d = copy_fixture(UNI, w / "ckpt")
    os.truncate(d / "model.ckpt.data-00000-of-00001", 2 * GIB)
    return Spec(["convert", "ckpt", "out.keras"], {0, 3}, new_ok=("out.keras", "out.keras.rest.npz"))


@case("memory")
def verify_inputs_npy_header_claims_96gib(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    npz_header_claims_huge(w / "x.npz")
    return Spec(["verify", "m.h5", "--inputs", "x.npz"], E)


@case("memory")
def verify_inputs_deflate_bomb_1_5gib(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    shutil.copyfile(ctx.deflate_bomb(), w / "x.npz")
    return Spec(["verify", "m.h5", "--inputs", "x.npz"], E, note="1.6 MB .npz, member inflates to 1.5 GiB")


@case("memory")
def verify_steps_huge(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--steps", "1000000000"], E)


@case("memory")
def verify_batch_huge(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--batch", "1000000000"], E)


@case("memory")
def tf1_hint_num_units_huge(w, ctx):
    d = copy_fixture("tf1/tf14_opaque_only", w / "ckpt")
    return Spec(["inspect", str(d.name), "--variable", "encoder/cudnn_params", "--num-units", str(10**12),
                 "--input-size", str(10**12)], E)


# =========================================================================== traceback

def _nested(n=200000) -> str:
    return "[" * n + "]" * n


@case("traceback")
def config_nested_arrays_200k(w, ctx):
    copy_fixture(WO, w / "w.h5")
    (w / "arch.json").write_text(_nested())
    return Spec(["convert", "w.h5", "out.keras", "--config", "arch.json"], E)


@case("traceback")
def config_nested_arrays_200k_inspect(w, ctx):
    copy_fixture(WO, w / "w.h5")
    (w / "arch.json").write_text(_nested())
    return Spec(["inspect", "w.h5", "--config", "arch.json"], E)


@case("traceback")
def config_nested_objects_in_layers(w, ctx):
    copy_fixture(WO, w / "w.h5")
    (w / "arch.json").write_text('{"class_name": "Sequential", "config": {"layers": [' + '{"a":' * 100000
                                 + "1" + "}" * 100000 + "]}}")
    return Spec(["convert", "w.h5", "out.keras", "--config", "arch.json"], E)


@case("traceback")
def h5_model_config_nested_200k(w, ctx):
    import h5py

    copy_fixture(SEQ, w / "m.h5")
    with h5py.File(w / "m.h5", "r+") as f:
        f.attrs["model_config"] = ('{"class_name": "Sequential", "config": {"layers": ' + _nested() + "}}").encode()
    return Spec(["convert", "m.h5", "out.keras"], {3})


@case("traceback")
def h5_model_config_nested_200k_inspect(w, ctx):
    spec = h5_model_config_nested_200k(w, ctx)
    spec.argv = ["inspect", "m.h5"]
    return spec


@case("traceback")
def config_invalid_utf8(w, ctx):
    copy_fixture(WO, w / "w.h5")
    (w / "arch.json").write_bytes(b'\xff\xfe{"class_name": "\xc3(\x80"}')
    return Spec(["convert", "w.h5", "out.keras", "--config", "arch.json"], E)


@case("traceback")
def config_json_number(w, ctx):
    copy_fixture(WO, w / "w.h5")
    (w / "arch.json").write_text("1e400")
    return Spec(["convert", "w.h5", "out.keras", "--config", "arch.json"], E)


@case("traceback")
def input_component_too_long(w, ctx):
    return Spec(["convert", "a" * 300 + ".h5", "out.keras"], {3})


@case("traceback")
def input_component_too_long_inspect(w, ctx):
    return Spec(["inspect", "a" * 300 + ".h5"], {3})


@case("traceback")
def output_component_too_long(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["convert", "m.h5", "b" * 300 + ".keras"], E)


@case("traceback")
def input_path_total_too_long(w, ctx):
    return Spec(["convert", "d/" * 2100 + "m.h5", "out.keras"], {3})


@case("traceback")
def output_path_total_too_long(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["convert", "m.h5", "d/" * 2100 + "out.keras"], E)


@case("traceback")
def config_component_too_long(w, ctx):
    copy_fixture(WO, w / "w.h5")
    return Spec(["convert", "w.h5", "out.keras", "--config", "c" * 300 + ".json"], E)


@case("traceback")
def verify_inputs_component_too_long(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--inputs", "x" * 300 + ".npz"], E)


@case("traceback")
def verify_json_component_too_long(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--json", "j" * 300 + ".json"], E)


@case("traceback")
def batch_input_component_too_long(w, ctx):
    return Spec(["convert", "a" * 300 + ".h5", "--out-dir", "out"], {3}, batch=True)


@case("traceback")
def batch_out_dir_component_too_long(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["convert", "m.h5", "--out-dir", "o" * 300], E, batch=True)


def _npz(w: Path, **arrays) -> str:
    np.savez(w / "x.npz", **arrays)
    return "x.npz"


@case("traceback")
def verify_inputs_wrong_feature_size(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--inputs", _npz(w, x=np.zeros((2, 8, 7), np.float32))], E)


@case("traceback")
def verify_inputs_wrong_rank(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--inputs", _npz(w, x=np.zeros((2, 6), np.float32))], E)


@case("traceback")
def verify_inputs_scalar(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--inputs", _npz(w, x=np.float32(1.0))], E)


@case("traceback")
def verify_inputs_wrong_dtype_complex(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--inputs", _npz(w, x=np.zeros((2, 8, 6), np.complex64))], E)


@case("traceback")
def verify_inputs_wrong_dtype_string(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--inputs", _npz(w, x=np.full((2, 8, 6), "abc"))], E)


@case("traceback")
def verify_inputs_wrong_dtype_structured(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--inputs", _npz(w, x=np.zeros((2, 8, 6), [("a", "<f4"), ("b", "<i4")]))], E)


@case("traceback")
def verify_inputs_token_ids_out_of_vocab(w, ctx):
    copy_fixture(TD, w / "td.h5")
    return Spec(["verify", "td.h5", "--inputs", _npz(w, x=np.full((2, 8), 25, np.int32))], E)


@case("traceback")
def verify_inputs_token_ids_huge(w, ctx):
    copy_fixture(TD, w / "td.h5")
    return Spec(["verify", "td.h5", "--inputs", _npz(w, x=np.full((2, 8), 10**12, np.int64))], E)


@case("traceback")
def verify_inputs_token_ids_negative(w, ctx):
    copy_fixture(TD, w / "td.h5")
    return Spec(["verify", "td.h5", "--inputs", _npz(w, x=np.full((2, 8), -1, np.int32))], E)


@case("traceback")
def verify_inputs_token_ids_float(w, ctx):
    copy_fixture(TD, w / "td.h5")
    return Spec(["verify", "td.h5", "--inputs", _npz(w, x=np.full((2, 8), 3.7, np.float32))], {0, 2, 3})


@case("traceback")
def verify_inputs_object_array_pickle(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    npz_pickle_bait(w / "x.npz", w / "PWNED")
    return Spec(["verify", "m.h5", "--inputs", "x.npz"], E, must_not_exist=("PWNED",))


@case("traceback")
def verify_inputs_not_a_zip(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    (w / "x.npz").write_text("not an npz\n")
    return Spec(["verify", "m.h5", "--inputs", "x.npz"], E)


@case("traceback")
def verify_inputs_plain_npy(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    np.save(w / "x.npy", np.zeros((2, 8, 6), np.float32))
    return Spec(["verify", "m.h5", "--inputs", "x.npy"], {0, 2, 3})


@case("traceback")
def verify_inputs_too_many_arrays(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--inputs", _npz(w, a=np.zeros((2, 8, 6), np.float32),
                                                     b=np.zeros((2, 8, 6), np.float32))], E)


@case("traceback")
def verify_inputs_empty_npz(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--inputs", _npz(w)], E)


@case("traceback")
def verify_inputs_zero_time_steps(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--inputs", _npz(w, x=np.zeros((2, 0, 6), np.float32))], {0, 2, 3})


@case("traceback")
def verify_inputs_zero_batch(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["verify", "m.h5", "--inputs", _npz(w, x=np.zeros((0, 8, 6), np.float32))], {0, 2, 3})


@case("traceback")
def verify_inputs_member_not_npy(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    npz_write(w / "x.npz", {"x.npy": b"\x93NUMPY garbage header"})
    return Spec(["verify", "m.h5", "--inputs", "x.npz"], E)


@case("traceback")
def verify_inputs_zip_member_path_traversal(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    npz_write(w / "x.npz", {"../../evil.npy": npy_bytes(np.zeros((2, 8, 6), np.float32))})
    return Spec(["verify", "m.h5", "--inputs", "x.npz"], {0, 2, 3}, must_not_exist=("../evil.npy", "evil.npy"))


# =========================================================================== outside: reads beyond what was named

@case("outside")
def ckpt_state_dotdot_convert(w, ctx):
    copy_fixture(UNI, w / "elsewhere")
    _state(w / "a", "../elsewhere/model.ckpt")
    return Spec(["convert", "a", "out.keras"], {3})


@case("outside")
def ckpt_state_dotdot_inspect(w, ctx):
    copy_fixture(UNI, w / "elsewhere")
    _state(w / "a", "../elsewhere/model.ckpt")
    return Spec(["inspect", "a"], {3})


@case("outside")
def ckpt_state_absolute_convert(w, ctx):
    copy_fixture(UNI, w / "elsewhere")
    _state(w / "a", str(w / "elsewhere" / "model.ckpt"))
    return Spec(["convert", "a", "out.keras"], {3})


@case("outside")
def ckpt_state_absolute_verify(w, ctx):
    copy_fixture(UNI, w / "elsewhere")
    _state(w / "a", str(w / "elsewhere" / "model.ckpt"))
    return Spec(["verify", "a"], {3})


@case("outside")
def ckpt_state_dotdot_beside_local_prefix(w, ctx):
    copy_fixture("tf1/layer_bidir", w / "elsewhere")
    d = copy_fixture(UNI, w / "a")
    _state(d, "../elsewhere/model.ckpt")
    return Spec(["convert", "a", "out.keras"], {3})


@case("outside")
def ckpt_explicit_prefix_elsewhere_is_fine(w, ctx):
    copy_fixture(UNI, w / "elsewhere")
    _state(w / "a", "../elsewhere/model.ckpt")
    return Spec(["convert", "elsewhere/model.ckpt", "out.keras"], {0}, new_ok=("out.keras", "out.keras.rest.npz"),
                must_exist=("out.keras",), note="control: the prefix named explicitly converts")


@case("outside")
def batch_ckpt_state_dotdot(w, ctx):
    copy_fixture(SEQ, w / "root" / "m.h5")
    copy_fixture(UNI, w / "elsewhere")
    _state(w / "root" / "a", "../../elsewhere/model.ckpt")
    return Spec(["convert", "root", "--out-dir", "out", "--keep-going"], {0, 3}, new_ok=("out", "out/m.keras"),
                partial_ok=True, batch=True)


@case("outside")
def batch_ckpt_state_absolute(w, ctx):
    copy_fixture(SEQ, w / "root" / "m.h5")
    copy_fixture(UNI, w / "elsewhere")
    _state(w / "root" / "a", str(w / "elsewhere" / "model.ckpt"))
    return Spec(["convert", "root", "--out-dir", "out", "--keep-going"], {0, 3}, new_ok=("out", "out/m.keras"),
                partial_ok=True, batch=True)


@case("outside")
def batch_named_ckpt_state_dotdot(w, ctx):
    copy_fixture(UNI, w / "elsewhere")
    _state(w / "a", "../elsewhere/model.ckpt")
    return Spec(["convert", "a", "--out-dir", "out"], {3}, batch=True)


#: Outputs that would prove batch discovery descended through a symlink out of its root.
NOT_FROM_OUTSIDE = ("out/b.keras", "out/ext", "out/up", "out/other.keras", "out/ckpt.keras", "out/ckpt")


@case("outside")
def batch_dir_symlink_outside_root(w, ctx):
    copy_fixture(SEQ, w / "root" / "m.h5")
    copy_fixture(SEQ, w / "outside" / "b.h5")
    os.symlink("../outside", w / "root" / "ext")
    return Spec(["convert", "root", "--out-dir", "out"], {0, 3}, new_ok=("out", "out/m.keras"), batch=True,
                partial_ok=True, message=r"symbolic link|symlink", must_not_exist=NOT_FROM_OUTSIDE)


@case("outside")
def batch_glob_symlink_outside_root(w, ctx):
    copy_fixture(SEQ, w / "root" / "m.h5")
    copy_fixture(SEQ, w / "outside" / "b.h5")
    os.symlink("../outside", w / "root" / "ext")
    return Spec(["convert", "root/**", "--out-dir", "out"], {0, 3}, new_ok=("out", "out/m.keras"), batch=True,
                partial_ok=True, message=r"symbolic link|symlink", must_not_exist=NOT_FROM_OUTSIDE)


@case("outside")
def batch_dir_symlink_to_parent(w, ctx):
    copy_fixture(SEQ, w / "root" / "m.h5")
    copy_fixture(SEQ, w / "other.h5")
    os.symlink("..", w / "root" / "up")
    return Spec(["convert", "root", "--out-dir", "out"], {0, 3}, new_ok=("out", "out/m.keras"), batch=True,
                partial_ok=True, message=r"symbolic link|symlink", must_not_exist=NOT_FROM_OUTSIDE)


@case("outside")
def batch_ckpt_dir_symlink_outside_root(w, ctx):
    copy_fixture(SEQ, w / "root" / "m.h5")
    copy_fixture(UNI, w / "outside" / "ckpt")
    os.symlink("../outside/ckpt", w / "root" / "ckpt")
    return Spec(["convert", "root", "--out-dir", "out"], {0, 3}, new_ok=("out", "out/m.keras"), batch=True,
                partial_ok=True, message=r"symbolic link|symlink", must_not_exist=NOT_FROM_OUTSIDE)


@case("outside")
def h5_external_link_model_weights_absolute(w, ctx):
    import h5py

    copy_fixture(SEQ, w / "m.h5")
    copy_fixture(SEQ, w / "other" / "victim.h5")
    with h5py.File(w / "m.h5", "r+") as f:
        del f["model_weights"]
        f["model_weights"] = h5py.ExternalLink(str(w / "other" / "victim.h5"), "/model_weights")
    return Spec(["convert", "m.h5", "out.keras"], {3})


@case("outside")
def h5_external_link_unused_group(w, ctx):
    import h5py

    copy_fixture(SEQ, w / "m.h5")
    copy_fixture(SEQ, w / "other" / "victim.h5")
    with h5py.File(w / "m.h5", "r+") as f:
        f["extra"] = h5py.ExternalLink(str(w / "other" / "victim.h5"), "/")
    return Spec(["convert", "m.h5", "out.keras"], {0, 3}, new_ok=("out.keras",))


@case("outside")
def h5_soft_link_cycle(w, ctx):
    import h5py

    copy_fixture(SEQ, w / "m.h5")
    with h5py.File(w / "m.h5", "r+") as f:
        f["model_weights/cu_dnngru/loop"] = h5py.SoftLink("/model_weights")
    return Spec(["convert", "m.h5", "out.keras"], {0, 3}, new_ok=("out.keras",))


@case("outside")
def h5_hard_link_cycle(w, ctx):
    import h5py

    copy_fixture(SEQ, w / "m.h5")
    with h5py.File(w / "m.h5", "r+") as f:
        f["model_weights/cu_dnngru/up"] = f["model_weights"]
    return Spec(["convert", "m.h5", "out.keras"], {0, 3}, new_ok=("out.keras",))


# =========================================================================== names: OUT.rest.npz members

def _rest_check(pattern: str, names):
    def check(res, work):
        if res.code != 0:
            return []
        found = sorted(work.glob(pattern))
        if not found:
            return [f"no {pattern} written"]
        problems = []
        members = zip_members(found[0])
        bad = unsafe_member_names(members)
        if bad:
            problems.append(f"unsafe rest.npz member names: {bad[:8]}")
        blobs = []
        with zipfile.ZipFile(found[0]) as zf:
            for m in members:
                blobs.append(zf.read(m))
        for side in found[0].parent.glob(found[0].name.replace(".npz", "") + "*"):
            if side != found[0] and side.is_file() and side.stat().st_size < 2**24:
                blobs.append(side.read_bytes())
        blob = b"\n".join(blobs)
        text = blob.decode("utf-8", "backslashreplace")
        missing = [n for n in names if n.encode() not in blob and json.dumps(n)[1:-1] not in text
                   and json.dumps(n, ensure_ascii=False)[1:-1] not in text]
        if missing:
            problems.append(f"original tensor names not kept in any manifest: {missing[:6]}")
        return problems
    return check


@case("names")
def rest_npz_hostile_member_names(w, ctx):
    shutil.copytree(ctx.hostile_ckpt(), w / "ckpt")
    return Spec(["convert", "ckpt", "out.keras"], {0}, new_ok=("out.keras", "out.keras.*"),
                must_exist=("out.keras", "out.keras.rest.npz"), check=_rest_check("out.keras.rest.npz", HOSTILE_NAMES))


@case("names")
def rest_npz_hostile_member_names_batch(w, ctx):
    shutil.copytree(ctx.hostile_ckpt(), w / "ckpt")
    return Spec(["convert", "ckpt", "--out-dir", "out"], {0}, new_ok=("out", "out/*"), batch=True,
                check=_rest_check("out/*.rest.npz", HOSTILE_NAMES))


@case("names")
def rest_npz_sanitized_names_collide(w, ctx):
    names = ["a/b", "a__b", "a_b", "a\\b", "a.b", "a:b"]
    tf1_with_names(w / "ckpt", ctx.cache, names)

    def check(res, work):
        if res.code != 0 or not (work / "out.keras.rest.npz").exists():
            return []
        members = zip_members(work / "out.keras.rest.npz")
        with zipfile.ZipFile(work / "out.keras.rest.npz") as zf:
            vals = sorted(float(np.load(zf.open(m), allow_pickle=False).ravel()[0]) for m in members
                          if m.endswith(".npy"))
        probs = _rest_check("out.keras.rest.npz", names)(res, work)
        if len(set(members)) != len(members) or not all(float(i) in vals for i in range(len(names))):
            probs.append(f"tensors lost in a name collision: members {members}")
        return probs
    return Spec(["convert", "ckpt", "out.keras"], {0}, new_ok=("out.keras", "out.keras.*"), check=check)


def _no_forged_lines(*starts):
    """A name with a raw newline must not start a line of its own on stdout/stderr (forged records)."""
    def check(res, work):
        probs = _no_raw_control_stdout(res, work)
        for stream, text in (("stdout", res.stdout), ("stderr", res.stderr)):
            for ln in text.splitlines():
                if ln.lstrip().startswith(starts):
                    probs.append(f"raw newline of a file name printed on {stream}: forged line {ln[:120]!r}")
                    break
        return probs
    return check


def _no_raw_control_stdout(res, work):
    import hostile_cases

    bad = [ln for ln in res.stdout.splitlines() if hostile_cases.CONTROL.search(ln)]
    return [f"raw control characters on stdout: {bad[0][:160]!r}"] if bad else []


@case("names")
def inspect_hostile_tensor_names(w, ctx):
    shutil.copytree(ctx.hostile_ckpt(), w / "ckpt")
    return Spec(["inspect", "ckpt"], {0}, check=_no_raw_control_stdout)


@case("names")
def inspect_json_hostile_tensor_names(w, ctx):
    shutil.copytree(ctx.hostile_ckpt(), w / "ckpt")

    def check(res, work):
        try:
            json.loads(res.stdout)
        except ValueError as e:
            return [f"--json output is not JSON ({e})"]
        return _no_raw_control_stdout(res, work)
    return Spec(["inspect", "ckpt", "--json"], {0}, check=check)


@case("names")
def hostile_rnn_scope_hint(w, ctx):
    copy_fixture(UNI, w / "ckpt")
    return Spec(["convert", "ckpt", "out.keras", "--rnn", "../../\x1b[2Jx\ny"], E)


# =========================================================================== messages: one line, escaped

@case("messages")
def input_name_with_newline(w, ctx):
    (w / "bad\nname.h5").write_text("not a model\n")
    return Spec(["convert", "bad\nname.h5", "out.keras"], {3})


@case("messages")
def input_name_with_esc(w, ctx):
    (w / "bad\x1b[31mred.h5").write_text("not a model\n")
    return Spec(["convert", "bad\x1b[31mred.h5", "out.keras"], {3})


@case("messages")
def input_name_with_newline_inspect(w, ctx):
    (w / "bad\nname.h5").write_text("not a model\n")
    return Spec(["inspect", "bad\nname.h5"], {3})


@case("messages")
def missing_input_with_carriage_return(w, ctx):
    return Spec(["convert", "gone\r\x1b[2K.h5", "out.keras"], {3})


@case("messages")
def output_dir_missing_name_with_newline(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["convert", "m.h5", "no\nsuch/out.keras"], E)


@case("messages")
def config_missing_name_with_esc(w, ctx):
    copy_fixture(WO, w / "w.h5")
    return Spec(["convert", "w.h5", "out.keras", "--config", "gone\x1b[2J.json"], E)


@case("messages")
def ckpt_state_path_with_esc(w, ctx):
    d = w / "ckpt"
    d.mkdir()
    (d / "checkpoint").write_bytes(b'model_checkpoint_path: "gone\x1b[2J\x07/model.ckpt"\n')
    return Spec(["convert", "ckpt", "out.keras"], {3})


@case("messages")
def valid_model_with_newline_in_name(w, ctx):
    copy_fixture(SEQ, w / "a\nb.h5")
    return Spec(["convert", "a\nb.h5", "out.keras"], {0}, new_ok=("out.keras",), check=_no_forged_lines("b.h5"))


@case("messages")
def batch_input_name_with_newline(w, ctx):
    (w / "bad\nFAILED forged.h5").write_text("not a model\n")
    return Spec(["convert", "bad\nFAILED forged.h5", "--out-dir", "out"], {3}, batch=True,
                check=_no_forged_lines("FAILED forged"))


@case("messages")
def batch_valid_model_with_forging_name(w, ctx):
    copy_fixture(SEQ, w / "models" / "a\nok  forged.h5 -> pwned.h5")
    return Spec(["convert", "models", "--out-dir", "out"], {0}, new_ok=("out", "out/*"), batch=True,
                check=_no_forged_lines("ok  forged", "forged.h5"))


# =========================================================================== batch

@case("batch")
def batch_dangling_symlink_output_refused_before(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    (w / "out").mkdir()
    (w / "victim").mkdir()
    os.symlink("../victim/m.keras", w / "out" / "m.keras")
    return Spec(["convert", "m.h5", "--out-dir", "out"], {3}, batch=True, message=r"symlink|symbolic link|link",
                not_message=r"appeared while converting", must_not_exist=("victim/m.keras",))


@case("batch")
def single_dangling_symlink_output_refused_before(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    (w / "victim").mkdir()
    os.symlink("victim/x.keras", w / "link.keras")
    return Spec(["convert", "m.h5", "link.keras"], {3}, message=r"symlink|symbolic link|link|exists",
                not_message=r"appeared while converting", must_not_exist=("victim/x.keras",))


@case("batch")
def single_dangling_symlink_output_force(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    (w / "victim").mkdir()
    os.symlink("victim/x.keras", w / "link.keras")
    return Spec(["convert", "m.h5", "link.keras", "--force"], {0, 3}, changed_ok=("link.keras",),
                must_not_exist=("victim/x.keras",))


# The two parity failures below are not the quick tier's sample of this class (two CLI runs with --verify, 12 s
# of its wall): tests/batch/test_batch.py's test_a_failure_is_never_turned_into_a_skip and
# test_parity_failure_exit_1_and_pass_exit_0 hold the same behaviour quickly, through the API and the CLI.
@case("batch")
def batch_parity_failure_leaves_no_output_and_rerun_is_not_skipped(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    argv = ["convert", "m.h5", "--out-dir", "out", "--verify", "--tolerance", "0", "--rtol", "0", "--floor-k", "0"]

    def check(res, work):
        probs = []
        if (work / "out" / "m.keras").exists():
            probs.append("out/m.keras kept after the parity failure")
        rerun = run_cli(argv + ["--skip-existing"], work, harness=work.parent / "harness2")
        text = rerun.stdout + "\n" + rerun.stderr
        if re.search(r"^\s*(skipped\s+[1-9]|skip(ped)?\b.*m\.h5)", text, re.M | re.I):
            probs.append(f"rerun with --skip-existing reports the failed item as skipped ({rerun.describe()})")
        if rerun.code != 1:
            probs.append(f"rerun with --skip-existing: {rerun.describe()} (expected exit 1 again)")
        return probs
    return Spec(argv, {1}, new_ok=("out",), partial_ok=True, batch=True, check=check)


@case("batch")
def single_parity_failure_leaves_no_output(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["convert", "m.h5", "out.keras", "--verify", "--tolerance", "0", "--rtol", "0", "--floor-k", "0"], {1},
                note="contract extension: exit 1 counts as a failure, so no output")


@case("batch")
def batch_output_symlink_to_file_outside_force(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    (w / "out").mkdir()
    (w / "victim.keras").write_bytes(b"precious, outside --out-dir\n")
    os.symlink("../victim.keras", w / "out" / "m.keras")
    return Spec(["convert", "m.h5", "--out-dir", "out", "--force"], {0, 3}, changed_ok=("out/m.keras",),
                batch=True)


@case("batch")
def batch_out_dir_is_a_file(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    (w / "out").write_text("I am a file\n")
    return Spec(["convert", "m.h5", "--out-dir", "out"], E, batch=True)


@case("batch")
def batch_out_dir_is_the_input_file(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["convert", "m.h5", "--out-dir", "m.h5"], E, batch=True)


@case("batch")
def batch_report_in_missing_dir(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["convert", "m.h5", "--out-dir", "out", "--report", "nodir/r.json"], {0, 2, 3}, batch=True,
                new_ok=("nodir", "nodir/r.json", "out", "out/m.keras"),
                note="either refused before converting anything, or the directory is created")


@case("batch")
def batch_two_inputs_same_output(w, ctx):
    copy_fixture(SEQ, w / "a" / "m.h5")
    copy_fixture(SEQ, w / "b" / "m.h5")
    return Spec(["convert", "a/m.h5", "b/m.h5", "--out-dir", "out"], E, batch=True)


@case("batch")
def batch_report_is_an_output(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    def check(res, work):
        p = work / "out" / "m.keras"
        if res.code == 0 and p.is_file() and p.read_bytes()[:2] != b"PK":
            return ["out/m.keras (the converted model) was overwritten by the JSON report"]
        return []
    return Spec(["convert", "m.h5", "--out-dir", "out", "--report", "out/m.keras"], E, batch=True, check=check)


# =========================================================================== own

@case("own")
def directory_as_config(w, ctx):
    copy_fixture(WO, w / "w.h5")
    (w / "arch.json").mkdir()
    return Spec(["convert", "w.h5", "out.keras", "--config", "arch.json"], E)


@case("own")
def directory_as_verify_inputs(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    (w / "x.npz").mkdir()
    return Spec(["verify", "m.h5", "--inputs", "x.npz"], E)


@case("own")
def directory_as_verify_converted(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    (w / "c.keras").mkdir()
    return Spec(["verify", "m.h5", "c.keras"], E)


@case("own")
def directory_as_verify_json(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    (w / "r.json").mkdir()
    return Spec(["verify", "m.h5", "--json", "r.json"], E)


@case("own")
def directory_named_like_model(w, ctx):
    (w / "m.h5").mkdir()
    return Spec(["convert", "m.h5", "out.keras"], {3})


@case("own")
def dev_null_as_input(w, ctx):
    return Spec(["convert", "/dev/null", "out.keras"], {3})


@case("own")
def dev_null_as_config(w, ctx):
    copy_fixture(WO, w / "w.h5")
    return Spec(["convert", "w.h5", "out.keras", "--config", "/dev/null"], E)


@case("own")
def dev_full_as_output(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    return Spec(["convert", "m.h5", "/dev/full"], E)


@case("own")
def device_node_as_output_force(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    try:
        os.mknod(w / "null.keras", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError as e:
        pytest.skip(f"cannot create a device node here ({e}); /dev itself is never used with --force")
    return Spec(["convert", "m.h5", "null.keras", "--force"], E,
                note="a device node (like /dev/null) as OUTPUT with --force must not be replaced by a file")


@case("own")
def input_self_symlink_loop(w, ctx):
    os.symlink("loop.h5", w / "loop.h5")
    return Spec(["convert", "loop.h5", "out.keras"], {3})


@case("own")
def output_parent_symlink_loop(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    os.symlink("l", w / "l")
    return Spec(["convert", "m.h5", "l/out.keras"], E)


@case("own")
def checkpoint_state_is_directory(w, ctx):
    (w / "ckpt" / "checkpoint").mkdir(parents=True)
    return Spec(["convert", "ckpt", "out.keras"], {3})


@case("own")
def checkpoint_dir_with_state_dir_and_prefix(w, ctx):
    d = copy_fixture(UNI, w / "ckpt")
    (d / "checkpoint").unlink()
    (d / "checkpoint").mkdir()
    return Spec(["convert", "ckpt", "out.keras"], {0, 3}, new_ok=("out.keras", "out.keras.rest.npz"))


@case("own")
def unicode_and_spaces_in_paths(w, ctx):
    copy_fixture(SEQ, w / "my models" / "ünï cödé 模型 (1).h5")
    (w / "out dir").mkdir()
    return Spec(["convert", "my models/ünï cödé 模型 (1).h5", "out dir/résultat ✓.keras"], {0},
                new_ok=("out dir/résultat ✓.keras",), must_exist=("out dir/résultat ✓.keras",))


@case("own")
def unicode_and_spaces_batch(w, ctx):
    copy_fixture(SEQ, w / "my models" / "ünï cödé 模型 (1).h5")
    copy_fixture(UNI, w / "my models" / "ck pt é")
    return Spec(["convert", "my models", "--out-dir", "out dir ✓"], {0}, new_ok=("out dir ✓", "out dir ✓/*"),
                batch=True, must_exist=("out dir ✓/ünï cödé 模型 (1).keras",))


@case("own")
def undecodable_bytes_in_file_name(w, ctx):
    name = b"bad\xff\xfe.h5"
    with open(os.path.join(os.fsencode(w), name), "wb") as f:
        f.write(b"not a model\n")
    return Spec(["convert", os.fsdecode(name), "out.keras"], {3})


@case("own", user="nobody")
def unreadable_config_as_nobody(w, ctx):
    copy_fixture(WO, w / "w.h5")
    copy_fixture(WOJ, w / "arch.json")
    os.chmod(w / "arch.json", 0)
    return Spec(["convert", "w.h5", "out.keras", "--config", "arch.json"], E, message=r"Permission denied|cannot")


@case("own", user="nobody")
def unreadable_verify_inputs_as_nobody(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    np.savez(w / "x.npz", x=np.zeros((2, 8, 6), np.float32))
    os.chmod(w / "x.npz", 0)
    return Spec(["verify", "m.h5", "--inputs", "x.npz"], E, message=r"Permission denied|cannot")


@case("own", user="nobody")
def unreadable_file_in_batch_dir_as_nobody(w, ctx):
    copy_fixture(SEQ, w / "models" / "a.h5")
    copy_fixture(SEQ, w / "models" / "locked.h5")
    os.chmod(w / "models" / "locked.h5", 0)
    return Spec(["convert", "models", "--out-dir", "out", "--keep-going"], {0, 3}, new_ok=("out", "out/a.keras"),
                partial_ok=True, batch=True)


@case("own", user="nobody")
def unreadable_subdir_in_batch_as_nobody(w, ctx):
    copy_fixture(SEQ, w / "models" / "a.h5")
    copy_fixture(SEQ, w / "models" / "locked" / "b.h5")
    os.chmod(w / "models" / "locked", 0)
    return Spec(["convert", "models", "--out-dir", "out", "--keep-going"], {0, 3}, new_ok=("out", "out/a.keras"),
                partial_ok=True, batch=True)


@case("own", user="nobody")
def readonly_out_dir_batch_as_nobody(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    (w / "out").mkdir()
    os.chmod(w / "out", 0o555)
    return Spec(["convert", "m.h5", "--out-dir", "out"], {3}, batch=True)


@case("own", user="nobody")
def readonly_cwd_verify_json_as_nobody(w, ctx):
    copy_fixture(SEQ, w / "m.h5")
    (w / "ro").mkdir()
    os.chmod(w / "ro", 0o555)
    return Spec(["verify", "m.h5", "--json", "ro/r.json"], {3})


# =========================================================================== a user's graph that never ends (issue 45)
# SavedModels whose signature holds a real CudnnRNN node beside a hostile computation
# (fixtures/make_hostile_graph_fixtures.py): every run of the graph is a bounded child (gruconv.tf.bounded)

HOSTILE_GRAPHS = "graphs_hostile"
SMALL_GRAPH_BUDGET = ["--graph-timeout", "5", "--graph-memory", "2"]


@case("hang", hang=True)
def graph_endless_loop_to_saved_model(w, ctx):
    copy_fixture(f"{HOSTILE_GRAPHS}/endless_loop", w / "g")
    return Spec(["convert", "g", "out", *SMALL_GRAPH_BUDGET], {3}, message=r"did not finish on probe inputs within 5 s")


@case("hang", hang=True)
def graph_endless_loop_to_stacks(w, ctx):
    copy_fixture(f"{HOSTILE_GRAPHS}/endless_loop", w / "g")
    return Spec(["convert", "g", "out.keras", *SMALL_GRAPH_BUDGET], {3},
                message=r"did not finish on probe inputs within 5 s")


@case("memory")
def graph_huge_fill_to_saved_model(w, ctx):
    copy_fixture(f"{HOSTILE_GRAPHS}/huge_fill", w / "g")
    return Spec(["convert", "g", "out", *SMALL_GRAPH_BUDGET], {3}, message=r"needed more than 2 GiB on probe inputs")


@case("memory")
def graph_huge_fill_to_onnx(w, ctx):
    copy_fixture(f"{HOSTILE_GRAPHS}/huge_fill", w / "g")
    return Spec(["convert", "g", "out.onnx", *SMALL_GRAPH_BUDGET], {3}, message=r"needed more than 2 GiB on probe inputs")


@case("messages")
def graph_asserting_on_every_input(w, ctx):
    copy_fixture(f"{HOSTILE_GRAPHS}/asserts", w / "g")
    return Spec(["convert", "g", "out", *SMALL_GRAPH_BUDGET], {3}, message=r"does not serve on a CPU")


# =========================================================================== the runner

@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hostile-cache")
    memo: dict = {}

    def once(key, build):
        if key not in memo:
            memo[key] = build()
        return memo[key]

    def converted_seq():
        def build():
            d = cache / "conv"
            d.mkdir()
            copy_fixture(SEQ, d / "m.h5")
            r = run_cli(["convert", "m.h5", "m.keras"], d, harness=cache / "conv-harness")
            assert r.code == 0 and (d / "m.keras").is_file(), f"could not prepare a converted model: {r.describe()}"
            return d / "m.keras"
        return once("converted", build)

    ns = types.SimpleNamespace(
        cache=cache,
        converted_seq=converted_seq,
        gzip_bomb=lambda: once("gzip", lambda: h5_gzip_bomb(cache / "bomb.h5")),
        deflate_bomb=lambda: once("deflate", lambda: npz_deflate_bomb(cache / "bomb.npz")),
        hostile_ckpt=lambda: once("names", lambda: tf1_with_names(cache / "hostile_ckpt", cache)),
    )
    yield ns


RESULTS: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    path = os.environ.get("GRUCONV_HOSTILE_REPORT")
    if path:
        Path(path).write_text(json.dumps(RESULTS, indent=1))  # ASCII: names may hold surrogate escapes


@contextlib.contextmanager
def _base(tmp_path: Path, user):
    if not user:
        yield tmp_path
        return
    if not (IS_ROOT and SETPRIV):
        pytest.skip("runs as 'nobody': needs root and setpriv (as a normal user, the plain cases cover it)")
    d = Path(tempfile.mkdtemp(prefix="gruconv-hostile-", dir="/tmp"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        for p in [d, *d.rglob("*")]:
            with contextlib.suppress(OSError):
                if not p.is_symlink():
                    os.chmod(p, 0o755)
        shutil.rmtree(d, ignore_errors=True)


def _fast_sample() -> set:
    """Tiers (docs/testing.md): every case starts a resource-limited ``gruconv`` child (the contract
    includes RLIMIT_DATA/RLIMIT_AS, a kill on timeout and a private ``$TMPDIR``, which only a real
    process gives), so the corpus runs in ``make test-all``; ``make test`` runs the first case of each
    class, so every kind of contract is exercised by the quick tier too."""
    first: dict = {}
    for name, (cls, _, opts) in CASES.items():
        if not opts["user"]:
            first.setdefault(cls, name)
    return set(first.values())


FAST_SAMPLE = _fast_sample()


@pytest.mark.parametrize("name", [n if n in FAST_SAMPLE else pytest.param(n, marks=pytest.mark.slow) for n in CASES])
def test_hostile(name, tmp_path, ctx):
    cls, build, opts = CASES[name]
    with _base(tmp_path, opts["user"]) as base:
        work = base / "work"
        work.mkdir()
        if opts["user"]:
            os.chmod(work, 0o777)
        spec = build(work, ctx)
        timeout = spec.timeout or (HANG_TIMEOUT if opts["hang"] else TIMEOUT)
        before = snapshot(work)
        res = run_cli(spec.argv, spec.cwd or work, harness=base / "harness", timeout=timeout,
                      user=spec.user or opts["user"])
        after = snapshot(work)
        problems = check_contract(res, before, after, spec, work, base / "harness" / "tmp")
        RESULTS[name] = {"class": cls, "ok": not problems, "code": res.code, "timed_out": res.timed_out,
                         "seconds": round(res.seconds, 1), "maxrss_mb": round(res.maxrss_mb),
                         "stderr_first": (res.lines[0] if res.lines else "")[:400],
                         "stderr_last": (res.lines[-1] if res.lines else "")[:400], "problems": problems,
                         "argv": [a[:120] for a in spec.argv]}
        assert not problems, (f"[{cls}] {name}: {res.describe()}\n  argv: {[a[:80] for a in spec.argv]}\n  - "
                              + "\n  - ".join(problems))


def test_enough_cases():
    assert len(CASES) >= 40
    classes = {c for c, _, _ in CASES.values()}
    assert {"destroy", "hang", "memory", "traceback", "outside", "names", "messages", "batch", "own"} <= classes
    assert {CASES[n][0] for n in FAST_SAMPLE} == classes  # the quick tier samples every class
