"""TensorFlow graph protobufs read without TensorFlow: a SavedModel's ``saved_model.pb`` / ``.pbtxt``, a
frozen ``GraphDef`` (``.pb`` / ``.pbtxt``), tf.keras's ``keras_metadata.pb`` and a SavedModel's object graph root.

Why not TensorFlow's own classes: ``tensorflow.core.framework.graph_pb2`` cannot be imported without
``tensorflow/__init__.py`` running first (the whole framework, seconds and hundreds of MiB), and
``gruconv inspect``/``convert`` import no ML framework (``tests/cli/test_cli.py``); ``protobuf`` is not a
dependency of gruconv.  So the binary form is walked with :func:`gruconv.readers.tfbundle.proto_fields`
(the one varint/wire decoder, which checks every declared length against the bytes present) and the
text form with the small tokenizer below; both answer through the same :class:`Message` interface, keyed
by the field names of :data:`SCHEMA`.

Only the fields gruconv reads are in :data:`SCHEMA`; every other field is skipped unread (a frozen
graph's weights, ``Const`` tensors, are stepped over as one length-delimited field).  Nothing recurses:
the schema is a fixed tree (SavedModel -> MetaGraphDef -> GraphDef -> FunctionDefLibrary -> FunctionDef
-> NodeDef -> attr map entry -> AttrValue -> ListValue -> TensorShapeProto -> Dim, at most eleven levels), so a protobuf nested a million levels deep is a
run of skipped bytes in binary and :data:`MAX_TEXT_DEPTH` in text.  Binary values are ``memoryview``
slices of the one buffer read (:func:`gruconv.files.inputs.read_bytes`, bounded by ``LIMITS["graph"]``),
so a walk copies no message; the time is linear in the bytes at each level.

Field numbers, from the ``.proto`` files (TensorFlow 2.21; checked against the generated descriptors
in ``tests/readers/test_graphs.py``): ``tensorflow/core/protobuf/saved_model.proto`` (SavedModel),
``meta_graph.proto`` (MetaGraphDef; its ``object_graph_def = 7``), ``saved_object_graph.proto`` (SavedObjectGraph
``nodes = 1``; SavedObject ``user_object = 4``; SavedUserObject ``identifier = 1``, ``metadata = 3``: where TF
2.0-2.4 kept a tf.keras model's metadata, :mod:`gruconv.readers.tf2.metadata`), ``tensorflow/core/framework/graph.proto`` (GraphDef), ``tensor_shape.proto`` (TensorShapeProto, its Dim),
``tensor.proto`` (TensorProto: ``dtype = 1``, ``tensor_shape = 2``; its data is never read),
``function.proto`` (FunctionDefLibrary, FunctionDef), ``op_def.proto`` (OpDef), ``node_def.proto``
(NodeDef), ``attr_value.proto`` (AttrValue; a ``map<string, AttrValue>`` is a repeated entry message with
``key = 1``, ``value = 2``), ``tensorflow/core/protobuf/trackable_object_graph.proto`` (a checkpoint's
object graph: ``nodes = 1``; TrackableObject ``children = 1``, ``attributes = 2``; ObjectReference
``node_id = 1``, ``local_name = 2``; SerializedTensor ``name = 1``, ``checkpoint_key = 3``), and tf_keras ``protobuf/saved_metadata.proto`` (SavedMetadata: ``nodes = 1``;
SavedObject: ``node_id = 2``, ``node_path = 3``, ``identifier = 4``, ``metadata = 5``, ``reserved 1``).
"""

from __future__ import annotations

import re
import struct
from typing import Iterator, Optional

from ..errors import InputError
from ..files.inputs import MAX_GRAPH_FIELDS
from .tfbundle import Malformed, proto_fields, unescape_text_bytes

#: message -> {field name: (field number, type)}; a type is ``string`` (UTF-8 text), ``bytes``, ``int``
#: (varint), ``bool`` (varint) or the name of another message here.
SCHEMA = {
    "SavedModel": {"saved_model_schema_version": (1, "int"), "meta_graphs": (2, "MetaGraphDef")},
    "MetaGraphDef": {"graph_def": (2, "GraphDef"), "object_graph_def": (7, "SavedObjectGraph")},
    "GraphDef": {"node": (1, "NodeDef"), "library": (2, "FunctionDefLibrary")},
    "FunctionDefLibrary": {"function": (1, "FunctionDef")},
    "FunctionDef": {"signature": (1, "OpDef"), "node_def": (3, "NodeDef"), "attr": (5, "AttrEntry"),
                    "arg_attr": (7, "ArgAttrEntry")},
    "OpDef": {"name": (1, "string"), "input_arg": (2, "ArgDef")},
    "ArgDef": {"name": (1, "string")},
    "ArgAttrEntry": {"key": (1, "int"), "value": (2, "ArgAttrs")},
    "ArgAttrs": {"attr": (1, "AttrEntry")},
    "NodeDef": {"name": (1, "string"), "op": (2, "string"), "input": (3, "string"), "device": (4, "string"),
                "attr": (5, "AttrEntry")},
    "AttrEntry": {"key": (1, "string"), "value": (2, "AttrValue")},
    "AttrValue": {"list": (1, "ListValue"), "s": (2, "bytes"), "i": (3, "int"), "f": (4, "float"), "b": (5, "bool"),
                  "type": (6, "dtype"), "shape": (7, "TensorShapeProto"), "tensor": (8, "TensorProto"),
                  "func": (10, "NameAttrList")},
    "ListValue": {"shape": (7, "TensorShapeProto"), "func": (9, "NameAttrList")},
    "NameAttrList": {"name": (1, "string")},
    "TensorShapeProto": {"dim": (2, "Dim"), "unknown_rank": (3, "bool")},
    "Dim": {"size": (1, "int")},
    "TensorProto": {"dtype": (1, "dtype"), "tensor_shape": (2, "TensorShapeProto")},
    "TrackableObjectGraph": {"nodes": (1, "TrackableObject")},
    "TrackableObject": {"children": (1, "ObjectReference"), "attributes": (2, "SerializedTensor")},
    "ObjectReference": {"node_id": (1, "int"), "local_name": (2, "string")},
    "SerializedTensor": {"name": (1, "string"), "checkpoint_key": (3, "string")},
    "SavedObjectGraph": {"nodes": (1, "SavedObject")},
    "SavedObject": {"user_object": (4, "SavedUserObject")},
    "SavedUserObject": {"identifier": (1, "string"), "metadata": (3, "string")},
    "SavedMetadata": {"nodes": (1, "SavedObjectMetadata")},
    "SavedObjectMetadata": {"node_id": (2, "int"), "node_path": (3, "string"), "identifier": (4, "string"),
                            "metadata": (5, "string")},
}

#: Wire type of each scalar type (``2`` for strings, bytes and messages).
_WIRE = {"int": 0, "dtype": 0, "bool": 0, "string": 2, "bytes": 2, "float": 5}
#: ``DataType`` enum names a text-format graph writes, by number (``tensorflow/core/framework/types.proto``;
#: only those a reader decides by; any other name reads as -1).
DATA_TYPES = {"DT_FLOAT": 1, "DT_DOUBLE": 2, "DT_INT32": 3, "DT_INT8": 6, "DT_INT64": 9, "DT_BOOL": 10,
              "DT_HALF": 19, "DT_RESOURCE": 20}

#: Most nesting a text-format graph may have: protobuf's own default recursion limit
#: (``google/protobuf/io/coded_stream.h`` ``kDefaultRecursionLimit``).
MAX_TEXT_DEPTH = 100


class Message:
    """One message of :data:`SCHEMA` type :attr:`type`, read lazily and streamed: :meth:`fields` yields
    ``(name, value)`` for the named fields in file order, :meth:`each` one field's values, :meth:`get` its
    last value or ``default``.  Strings come back as ``str``, bytes as ``bytes``, messages as
    :class:`Message`.  Nothing is collected into lists: a message of ten million repeated fields costs
    time, never memory (the caller keeps what it needs)."""

    type: str

    def fields(self, *names: str) -> Iterator[tuple]:
        raise NotImplementedError

    def each(self, name: str) -> Iterator:
        return (value for _, value in self.fields(name))

    def get(self, name: str, default=None):
        value = default
        for value in self.each(name):
            pass
        return value

    def may_hold(self, marker: bytes) -> bool:
        """False only when ``marker`` is certainly not in the message (a cheap filter before a walk)."""
        return True


class WireMessage(Message):
    """A binary message: a ``memoryview`` of its bytes and its type; ``what`` names it in errors;
    ``budget``: the fields the whole walk may still look at, shared by every message of one file
    (``[count]``, :data:`gruconv.files.inputs.MAX_GRAPH_FIELDS`)."""

    def __init__(self, buf, type: str, what: str, budget: list):
        self.buf, self.type, self.what, self.budget = buf, type, what, budget

    def fields(self, *names: str) -> Iterator[tuple]:
        schema = SCHEMA[self.type]
        by_number = {schema[n][0]: n for n in names}
        for field, wire, value in proto_fields(self.buf, self.what):
            self.budget[0] -= 1  # skipped fields count too: stepping over one costs as much
            if self.budget[0] < 0:
                raise TooLarge(f"more than {MAX_GRAPH_FIELDS} fields to look at; refused (a real graph has far "
                               "fewer)")
            name = by_number.get(field)
            if name is None:
                continue
            kind = schema[name][1]
            want = _WIRE.get(kind, 2)
            if wire != want:
                raise Malformed(f"{self.what} field {field} ({self.type}.{name}): wire type {wire}, expected {want}")
            if kind == "string":
                yield name, bytes(value).decode("utf-8", "replace")
            elif kind == "bytes":
                yield name, bytes(value)
            elif kind == "dtype":
                yield name, value
            elif kind == "int":
                yield name, value - (1 << 64) if value >= 1 << 63 else value  # int64: two's complement
            elif kind == "float":
                yield name, struct.unpack("<f", value.to_bytes(4, "little"))[0]
            elif kind == "bool":
                yield name, bool(value)
            else:
                yield name, WireMessage(value, kind, f"{self.what}.{name}", self.budget)

    def may_hold(self, marker: bytes) -> bool:
        return bytes(self.buf).find(marker) >= 0


class TooLarge(Malformed):
    """A graph over :data:`gruconv.files.inputs.MAX_GRAPH_FIELDS`: refused as too large, not as damaged."""


def parse_binary(data: bytes, type: str, what: str) -> WireMessage:
    """The top message of serialized ``data`` (nothing is decoded until asked)."""
    return WireMessage(memoryview(data), type, what, [MAX_GRAPH_FIELDS])


# --------------------------------------------------------------------------- text format

class TextMessage(Message):
    """A text-format message, parsed already (only the fields :data:`SCHEMA` names were kept)."""

    def __init__(self, type: str):
        self.type = type
        self.kept: list = []  # (name, value) in text order

    def fields(self, *names: str) -> Iterator[tuple]:
        for n in names:
            SCHEMA[self.type][n]  # a name outside the schema is a bug: KeyError
        return ((n, v) for n, v in self.kept if n in names)


#: Text-format tokens (``google/protobuf/text_format.py`` ``Tokenizer``): whitespace and ``#`` comments,
#: quoted strings (adjacent ones concatenate), punctuation, and words (names, numbers, enum values).
_TOKEN = re.compile(r"""(?P<skip>\s+|\#[^\n]*)
                       |(?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
                       |(?P<punct>[{}<>\[\]:;,])
                       |(?P<word>[^\s{}<>\[\]:;,"'\#]+)""", re.X)
_CLOSE = {"{": "}", "<": ">"}
_TRUE = {"true", "True", "t", "1"}
_FALSE = {"false", "False", "f", "0"}


def _tokens(text: str, what: str) -> Iterator[tuple[str, str, int]]:
    pos, end = 0, len(text)
    while pos < end:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise Malformed(f"{what}: unexpected character {text[pos]!r} at offset {pos}")
        pos = m.end()
        if m.lastgroup != "skip":
            yield m.lastgroup, m.group(), m.start()


def _scalar(kind: str, tokens: list, what: str):
    """A scalar field's value from its tokens (strings: one or more adjacent literals)."""
    if kind in ("string", "bytes"):
        if not tokens or any(t[0] != "str" for t in tokens):
            raise Malformed(f"{what}: expected a quoted string")
        try:
            raw = b"".join(unescape_text_bytes(t[1][1:-1]) for t in tokens)
        except ValueError as e:
            raise Malformed(f"{what}: {e}") from None
        return raw.decode("utf-8", "replace") if kind == "string" else raw
    if len(tokens) != 1 or tokens[0][0] != "word":
        raise Malformed(f"{what}: expected one value")
    word = tokens[0][1]
    if kind == "dtype" and not word.lstrip("-").isdigit():
        return DATA_TYPES.get(word, -1)
    if kind == "bool":
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise Malformed(f"{what}: {word[:40]!r} is not a bool")
    try:
        return float(word.rstrip("fF")) if kind == "float" else int(word, 0 if kind == "int" else 10)
    except ValueError:
        raise Malformed(f"{what}: {word[:40]!r} is not an integer") from None


class _Lexer:
    """:func:`_tokens` with one token of look-ahead."""

    def __init__(self, text: str, what: str):
        self.toks, self.ahead = _tokens(text, what), None

    def take(self):
        if self.ahead is not None:
            t, self.ahead = self.ahead, None
            return t
        return next(self.toks, None)

    def peek(self):
        if self.ahead is None:
            self.ahead = next(self.toks, None)
        return self.ahead


def parse_text(text: str, type: str, what: str, keep=None) -> TextMessage:
    """Parse text-format ``text`` as a ``type`` message, keeping the :data:`SCHEMA` fields; iterative
    (an explicit stack no deeper than :data:`MAX_TEXT_DEPTH`), linear in the text.  ``keep(message)``,
    asked as each message closes, drops the ones the caller has no use for (a graph's non-cuDNN nodes),
    so memory follows what is kept, not the text."""
    root = TextMessage(type)
    # one frame per open message: [message (None: a field outside the schema, skipped), its closing
    # punctuation, the field whose "[{...}, {...}]" list is open in it]
    stack: list = [[root, None, None, None]]
    lex = _Lexer(text, what)

    def open_message(frame, name: str, opener: str) -> None:
        if len(stack) >= MAX_TEXT_DEPTH:
            raise Malformed(f"{what}: nested deeper than {MAX_TEXT_DEPTH} levels; refused")
        msg = frame[0]
        known = SCHEMA[msg.type].get(name) if msg is not None else None
        sub = TextMessage(known[1]) if known is not None and known[1] in SCHEMA else None
        stack.append([sub, _CLOSE[opener], None, name])

    def scalar_tokens() -> list:
        first = lex.take()
        if first is None or first[0] == "punct":
            raise Malformed(f"{what}: expected a value" + (f" at offset {first[2]}" if first else " (the text ends)"))
        out = [first]
        while first[0] == "str" and (p := lex.peek()) is not None and p[0] == "str":
            out.append(lex.take())
        return out

    def store(frame, name: str, tokens: list) -> None:
        msg = frame[0]
        known = SCHEMA[msg.type].get(name) if msg is not None else None
        if known is not None and known[1] not in SCHEMA:
            msg.kept.append((name, _scalar(known[1], tokens, f"{what} {msg.type}.{name}")))

    while True:
        frame = stack[-1]
        t = lex.take()
        if frame[2] is not None:  # inside a list of messages
            if t is None:
                raise Malformed(f"{what}: ends inside a list (expected ']')")
            if t[1] == "]":
                frame[2] = None
            elif t[1] in _CLOSE:
                open_message(frame, frame[2], t[1])
            elif t[1] != ",":
                raise Malformed(f"{what}: expected a message in the list of {frame[2][:40]!r} (offset {t[2]})")
            continue
        if t is None:
            if len(stack) > 1:
                raise Malformed(f"{what}: ends inside a message (expected {frame[1]!r})")
            return root
        kind, tok, at = t
        if kind == "punct" and tok in (";", ","):
            continue
        if kind == "punct" and tok == frame[1]:
            stack.pop()
            if frame[0] is not None and stack[-1][0] is not None and (keep is None or keep(frame[0])):
                stack[-1][0].kept.append((frame[3], frame[0]))
            continue
        if kind == "punct" and tok == "[":  # an extension or Any type name, [pkg.Name]: never kept
            while (nt := lex.take()) is not None and nt[1] != "]":
                pass
            name = "[extension]"
        elif kind == "word":
            name = tok
        else:
            raise Malformed(f"{what}: unexpected {tok[:20]!r} at offset {at} (expected a field name)")
        nxt = lex.peek()
        if nxt is not None and nxt[1] == ":":
            lex.take()
            nxt = lex.peek()
        if nxt is None:
            raise Malformed(f"{what}: field {name[:40]!r} has no value (the text ends)")
        if nxt[1] in _CLOSE:
            lex.take()
            open_message(frame, name, nxt[1])
            continue
        if nxt[1] != "[":
            store(frame, name, scalar_tokens())
            continue
        lex.take()
        p = lex.peek()
        if p is not None and (p[1] in _CLOSE or p[1] == "]"):
            frame[2] = name  # a list of messages (or an empty list)
            continue
        while True:  # a list of scalars
            store(frame, name, scalar_tokens())
            sep = lex.take()
            if sep is None or sep[1] not in (",", "]"):
                raise Malformed(f"{what}: expected ',' or ']' in the list of {name[:40]!r}")
            if sep[1] == "]":
                break


def parse(data: bytes, type: str, what: str, *, text: bool, path=None, keep=None) -> Message:
    """``data`` as a ``type`` message, binary or text (``keep``: :func:`parse_text`'s); a text that is not
    UTF-8 is an :class:`InputError`."""
    if not text:
        return parse_binary(data, type, what)
    try:
        decoded = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"is not a text-format protobuf (not UTF-8 at byte {e.start})", path=path) from None
    return parse_text(decoded, type, what, keep)


def malformed(e: Exception, what: str, path) -> InputError:
    """The one-line refusal of a damaged (or :class:`TooLarge`) graph file; ``what`` without its article."""
    if isinstance(e, TooLarge):
        return InputError(f"is a {what} with {e}", path=path)
    return InputError(f"is not a readable {what} ({e}); the file is damaged or not a TensorFlow graph", path=path)


def tensor_shape(shape: Optional[Message]) -> Optional[tuple]:
    """A ``TensorShapeProto`` as a tuple of dims (None for an unknown dim), None for an unknown rank."""
    if shape is None or shape.get("unknown_rank", False):
        return None
    return tuple(None if d < 0 else d for d in (dim.get("size", 0) for dim in shape.each("dim")))
