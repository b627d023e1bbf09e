"""TF 1.x ``tf.contrib.cudnn_rnn`` checkpoint key names: patterns, name styles, scopes.

What TF 1.x wrote (names checked against the TF sources; ``shared/DESIGN.md``,
``docs/lstm-format-facts.md`` section 3, ``fixtures/README.md``):

TF 1.5–1.15 layer (style ``"1.5"``)
    ``<scope>/opaque_kernel`` (1-D, the opaque buffer; scope ``cudnn_gru``,
    ``cudnn_lstm``, uniquified ``cudnn_lstm_1`` ...) plus its saveable's
    canonical tensors under ``<scope>/rnn/multi_rnn_cell/cell_<l>/<cell>/`` or
    ``<scope>/stack_bidirectional_rnn/cell_<l>/bidirectional_rnn/{fw,bw}/<cell>/``,
    ``<cell>`` = ``cudnn_compatible_gru_cell`` / ``cudnn_compatible_lstm_cell``.
TF 1.4 ops API (style ``"1.4"``)
    a buffer variable the user named, optionally a saveable with the same
    canonical names under some scope.
TF 1.3 ``RNNParamsSaveable`` (style ``"1.3"``)
    ``<scope>/multi_rnn_cell/cell_<l>/<cell>/...`` (no ``rnn/``) plus the
    unsummed bias halves: GRU ``bias_cudnn 0`` / ``bias_cudnn 1`` (a space),
    LSTM ``bias_cudnn_0`` / ``bias_cudnn_1`` (an underscore).

The tensors under ``<cell>/`` are listed in :mod:`.cells` (one table per
cell); this module only knows where they sit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .cells import TF_CELLS

FORMAT = "tf1-checkpoint"
FLOATS = ("float16", "float32", "float64")
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
TABLE_MAGIC = (0xDB4775248B80FB57).to_bytes(8, "little")
DATA_RE = re.compile(r"^.+\.data-\d{5,}-of-\d{5,}$")

#: ``<cell dir name>`` -> cell ("cudnn_compatible_gru_cell" -> "gru").
CELL_DIRS = {spec.scope: name for name, spec in TF_CELLS.items()}
_CELL_ALT = "|".join(re.escape(d) for d in CELL_DIRS)
_NAME_ALT = "|".join(sorted({re.escape(n) for spec in TF_CELLS.values() for n in spec.all_names()},
                            key=len, reverse=True))
UNI_RE = re.compile(
    rf"^(?P<base>(?:.*/)?)multi_rnn_cell/cell_(?P<layer>\d+)/(?P<cell>{_CELL_ALT})/(?P<name>{_NAME_ALT})$", re.S)
BI_RE = re.compile(
    rf"^(?P<base>(?:.*/)?)stack_bidirectional_rnn/cell_(?P<layer>\d+)/bidirectional_rnn/"
    rf"(?P<dir>fw|bw)/(?P<cell>{_CELL_ALT})/(?P<name>{_NAME_ALT})$", re.S)

#: Layer scopes of the cuDNN RNN layers (snake_case of CudnnGRU, CudnnLSTM, CudnnRNNRelu,
#: CudnnRNNTanh, uniquified with ``_<n>``): the cell their ``opaque_kernel`` holds.
LAYER_SCOPE_RE = re.compile(r"^cudnn_(?P<kind>gru|lstm|rnn_relu|rnn_tanh)(?:_\d+)?$")

STYLE_TEXT = {
    "1.5": "TF 1.5+ Cudnn{title} layer",
    "1.4": "TF 1.4+ Cudnn{title}Saveable",
    "1.3": "TF 1.3 RNNParamsSaveable",
}


def style_text(style: str, cell: str) -> str:
    return STYLE_TEXT[style].format(title=TF_CELLS[cell].title)


def layer_kind(scope: str):
    """The layer kind (``gru``, ``lstm``, ``rnn_relu``, ``rnn_tanh``) a scope's last part names, or None."""
    m = LAYER_SCOPE_RE.match(scope.rsplit("/", 1)[-1])
    return m["kind"] if m else None


def scope_of_buffer(key: str) -> str:
    if key == "opaque_kernel":
        return ""
    if key.endswith("/opaque_kernel"):
        return key[: -len("/opaque_kernel")]
    return key.rsplit("/", 1)[0] if "/" in key else key


def under(key: str, scope: str) -> bool:
    return scope == "" or key.startswith(scope + "/")


def natural_key(text: str) -> tuple:
    """Sort key with numbers compared as numbers: ``cudnn_lstm_10`` after ``cudnn_lstm_9``
    (TF uniquifies layer scopes in creation order)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text) if p)


@dataclass
class Group:
    """One set of canonical cell tensors: a stack's ``(layer, direction, name) -> key``."""

    base: str
    bidirectional: bool
    cell: str
    tensors: dict = field(default_factory=dict)      # (layer, dir, name) -> key

    @property
    def spec(self):
        return TF_CELLS[self.cell]

    @property
    def has_tf13_biases(self) -> bool:
        return any(n in self.spec.tf13_names for (_, _, n) in self.tensors)

    @property
    def style(self) -> str:
        if self.has_tf13_biases:
            return "1.3"
        if not self.bidirectional and not (self.base == "rnn/" or self.base.endswith("/rnn/")):
            return "1.3"  # RNNParamsSaveable names without their bias_cudnn halves
        return "1.5"

    @property
    def scope(self) -> str:
        base = self.base
        if not self.bidirectional and self.style != "1.3":
            base = base[: -len("rnn/")]
        return base.rstrip("/")

    def where(self, layer: int, d: int) -> str:
        """The key prefix of one cell's tensors (for messages)."""
        if self.bidirectional:
            return (f"{self.base}stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/"
                    f"{'bw' if d else 'fw'}/{self.spec.scope}")
        return f"{self.base}multi_rnn_cell/cell_{layer}/{self.spec.scope}"


def find_groups(keys) -> list:
    """Every canonical group among ``keys`` (index only), in key order."""
    groups: dict = {}
    for key in keys:
        m = BI_RE.match(key)
        bidir = m is not None
        if m is None:
            m = UNI_RE.match(key)
        if m is None:
            continue
        cell = CELL_DIRS[m["cell"]]
        if m["name"] not in TF_CELLS[cell].all_names():
            continue  # another cell's tensor name under this cell's directory
        g = groups.setdefault((m["base"], bidir, cell), Group(m["base"], bidir, cell))
        d = (1 if m["dir"] == "bw" else 0) if bidir else 0
        g.tensors[(int(m["layer"]), d, m["name"])] = key
    return [groups[k] for k in sorted(groups)]
