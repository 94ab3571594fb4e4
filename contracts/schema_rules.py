"""Generic schema rules over onnxruntime's own operator registry (``contracts/schemas``).

What ORT's schema layer checks when it creates a session, in its order, for every node of the
main graph and of every subgraph, with ORT's wording (probed on 1.31.1 and 1.32.0):

* ``ORT-OPSET-001`` (model load): at least one opset import; no import above what ORT supports
  (``ValidateOpsetForDomain``); no import of version <= 0 (nothing resolves there).
  ``ORT-OPSET-002`` (a warning: ORT itself ignores an import no node uses, so it never refuses
  a load): an import of a domain ORT does not know, dropped by the runner when a custom-op
  library is registered.
* ``ORT-SCHEMA-001``: the op is registered for its domain at the model's opset import (an op of a
  domain ORT does not know is ``ORT-SCHEMA-011``, dropped by the runner when the graph's session
  registers a custom-op library); ``ORT-SCHEMA-010``: the resolved schema is not deprecated.
* ``ORT-SCHEMA-004``: input / output counts within the schema's bounds; ``ORT-SCHEMA-008``: an
  empty name only in an optional slot.
* ``ORT-SCHEMA-003``: every attribute is known; ``ORT-SCHEMA-006``: of the declared type;
  ``ORT-SCHEMA-007``: required attributes present. A ``Constant`` is none of these: ORT's graph
  constructor makes it an initializer from its first attribute, whatever its name, before any
  schema check, and refuses only one without attributes (ORT-SCHEMA-007) or whose first attribute
  is of a kind that is no data (a graph, a list of tensors: ORT-SCHEMA-006), with ORT's texts.
* ``ORT-SCHEMA-002``: each input type within its type parameter's allowed list;
  ``ORT-SCHEMA-005``: one type per type parameter; ``ORT-SCHEMA-009``: a declared output type
  agrees with the type the schema binds.

Each rule exists once per committed dump (``since``/``until`` by version), so the registry of the
version being mirrored is the one consulted. The rules follow the CPU wheel's registry; the CUDA
build's published schema text agrees with it for every op it lists
(``schema_registry.CUDA_SCHEMA_DIFFERENCES`` is empty, re-derived by a test), so a graph meant for
CUDA is judged by the same schemas.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import onnx_ir as ir

from contracts._facts import Typing, model_facts, type_str
from contracts._graph import ModelLike, as_ir_model, node_label
from contracts._rule import GraphExamples, ModelCheck, OrtVersions, Rule, RuleDoc, Violation
from contracts.schema_registry import (
    ONNX_DOMAINS,
    OpSchema,
    Registry,
    available_versions,
    registry_for,
)

__all__ = ["RULES", "node_schema_problem", "schema_clean"]

_SRC = "onnxruntime get_all_operator_schema() (contracts/schemas/ort-{v}.json); onnx OpSchema::Verify"


def _unregistered(node: ir.Node, version: int | None) -> str:
    if node.domain in ONNX_DOMAINS:
        return f"No Op registered for {node.op_type} with domain_version of {version}"
    return f"Fatal error: {node.domain}:{node.op_type}(-1) is not a registered function/op"


def _verify(node: ir.Node, schema: OpSchema) -> tuple[str, str] | None:
    """Onnx ``OpSchema::Verify``: (rule id, ORT's text) of the first failure, in its order."""
    name = node_label(node)
    # ORT writes "Node(name)" for a named node and a bare "Node" for an unnamed one (probed, 1.32.0).
    head = f"{f'Node({name})' if name else 'Node'} with schema({schema.domain}::{schema.name}:{schema.since}) has"
    if not schema.min_input <= len(node.inputs) <= schema.max_input:
        return "ORT-SCHEMA-004", (f"{head} input size {len(node.inputs)} not in range "
                                  f"[min={schema.min_input}, max={schema.max_input}].")  # fmt: skip
    if not schema.min_output <= len(node.outputs) <= schema.max_output:
        return "ORT-SCHEMA-004", (f"{head} output size {len(node.outputs)} not in range "
                                  f"[min={schema.min_output}, max={schema.max_output}].")  # fmt: skip
    for index, value in enumerate(node.inputs):
        param = schema.input_param(index)
        if value is None and param is not None and param.option == "single":
            return "ORT-SCHEMA-008", f"Node ({name})'s input {index} is marked single but has an empty string in the graph"
    for index, value in enumerate(node.outputs):
        param = schema.output_param(index)
        if not value.name and param is not None and param.option == "single":
            return "ORT-SCHEMA-008", f"Node ({name})'s output {index} is marked single but has an empty string in the graph"
    for attr_name, attribute in node.attributes.items():
        if attr_name.startswith("__"):
            continue  # internal symbols are not schema-checked
        declared = schema.attributes.get(attr_name)
        if declared is None:
            return "ORT-SCHEMA-003", f"Unrecognized attribute: {attr_name} for operator {node.op_type}"
        actual = attribute.type.name
        if actual != declared[0]:
            return "ORT-SCHEMA-006", (f"Mismatched attribute type in '{name} : {attr_name}'. "
                                      f"Expected: '{declared[0]}', actual: '{actual}'")  # fmt: skip
    for attr_name, (_kind, required, _default) in schema.attributes.items():
        if required and attr_name not in node.attributes:
            return "ORT-SCHEMA-007", f"Required attribute '{attr_name}' is missing."
    return None


def _types(node: ir.Node, schema: OpSchema, typing: Typing) -> tuple[str, str] | None:
    """Type inference's input checks: allowed types, then one type per parameter."""
    name = node_label(node)
    bound: dict[str, str] = {}
    for index, value in enumerate(node.inputs):
        param = schema.input_param(index)
        if value is None or param is None:
            continue
        dtype = typing.elem_type(value)
        if dtype is None:
            continue
        text = type_str(dtype)
        allowed = schema.allowed(param.type_str)
        if allowed is not None and text not in allowed:
            return "ORT-SCHEMA-002", (f"Type Error: Type '{text}' of input parameter ({value.name}) of operator "
                                      f"({node.op_type}) in node ({name}) is invalid.")  # fmt: skip
        if param.type_str not in schema.type_constraints or (not param.homogeneous and param.option == "variadic"):
            continue
        first = bound.setdefault(param.type_str, text)
        if first != text:
            return "ORT-SCHEMA-005", (f"Type Error: Type parameter ({param.type_str}) of Optype ({node.op_type}) "
                                      f"bound to different types ({first} and {text} in node ({name}).")  # fmt: skip
    return None


# Ops whose inference sets an output type from an attribute, not from the type binding.
_OUTPUT_TYPE_ATTRS = {"DynamicSparseAttention": "output_bf16", "RMSNormRotary": "output_fp16"}


def _outputs(node: ir.Node, typing: Typing) -> tuple[str, str] | None:
    if node.op_type in _OUTPUT_TYPE_ATTRS and _OUTPUT_TYPE_ATTRS[node.op_type] in node.attributes:
        return None
    for value in node.outputs:
        if not value.name:
            continue
        found = typing.declared_mismatch(value)
        if found is not None:
            declared, inferred = found
            return "ORT-SCHEMA-009", (f"Type Error: Type ({type_str(declared)}) of output arg ({value.name}) of node "
                                      f"({node_label(node)}) does not match expected type ({type_str(inferred)}).")  # fmt: skip
    return None


# The attribute kinds ConstantNodeProtoToTensorProto turns into data (others: INVALID_GRAPH).
_CONSTANT_DATA_KINDS = frozenset({
    ir.AttributeType.FLOAT, ir.AttributeType.FLOATS, ir.AttributeType.INT, ir.AttributeType.INTS,
    ir.AttributeType.STRING, ir.AttributeType.STRINGS, ir.AttributeType.TENSOR, ir.AttributeType.SPARSE_TENSOR,
})  # fmt: skip


def node_schema_problem(node: ir.Node, typing: Typing) -> tuple[str, str] | None:
    """(rule id, ORT's text) of the first schema-layer failure of ``node``, or None."""
    if node.op_type == "Constant" and node.domain in ONNX_DOMAINS:
        # ORT's graph constructor turns every Constant into an initializer from its first
        # attribute (utils::ConstantNodeProtoToTensorProto) before any schema check: only a
        # Constant without attributes is refused, and its attribute names are never verified.
        first = next(iter(node.attributes.values()), None)
        if first is None:
            return "ORT-SCHEMA-007", f"Constant node: {node_label(node)} has no data attributes"
        if first.type not in _CONSTANT_DATA_KINDS:
            return "ORT-SCHEMA-006", f"Unsupported attribute value type of {first.type.value} in 'Constant' node '{node_label(node)}'"
        return None
    schema = typing.schema(node)
    if schema is None:
        if node.domain not in typing.registry.domains:  # the ir reader spells ai.onnx as ""
            return "ORT-SCHEMA-011", _unregistered(node, typing.opset_version(node.domain))
        return "ORT-SCHEMA-001", _unregistered(node, typing.opset_version(node.domain))
    if schema.deprecated:
        return "ORT-SCHEMA-010", f"Op registered for {node.op_type} is deprecated in domain_version of {typing.opset_version(node.domain)}"
    return _verify(node, schema) or _types(node, schema, typing) or _outputs(node, typing)


def _problems(model: ModelLike, registry: Registry) -> list[tuple[ir.Node, str, str]]:
    """Every node's first schema failure (cached per model and version)."""
    ir_model = as_ir_model(model)
    facts = model_facts(ir_model)
    key = ("schema_rules", registry.ort_version)
    if key not in facts.extra:
        typing = facts.typing(registry)
        found = []
        for node in facts.all_nodes():
            problem = node_schema_problem(node, typing)
            if problem is not None:
                found.append((node, *problem))
        facts.extra[key] = found
    cached: list[tuple[ir.Node, str, str]] = facts.extra[key]
    return cached


def schema_clean(model: ModelLike, node: ir.Node) -> bool:
    """Whether ``node`` passes the schema layer of the newest onnxruntime mirrored.

    The op-specific rules (shape inference, kernels) look only at such nodes, as ORT stops at the
    schema layer.
    """
    registry = registry_for(available_versions()[-1])
    facts = model_facts(as_ir_model(model))
    key = ("schema_clean", registry.ort_version)
    bad = facts.extra.get(key)
    if bad is None:
        bad = facts.extra[key] = {id(n) for n, _rid, _text in _problems(model, registry)}
    return id(node) not in bad


def _opset_problems(model: ModelLike, registry: Registry) -> Iterator[str]:
    imports = as_ir_model(model).opset_imports
    if not imports:
        yield ("Missing opset in the model. All ModelProtos MUST have at least one entry that specifies which "
               "version of the ONNX OperatorSet is being imported.")  # fmt: skip
    for domain, version in sorted(imports.items()):
        top = registry.opset_max.get(domain)
        if top is not None and version > top:
            shown = "ai.onnx" if domain == "" else domain
            yield (f"ONNX Runtime only *guarantees* support for models stamped with official released onnx opset "
                   f"versions. Opset {version} is under development and support for this is limited. The operator "
                   "schemas and or other functionality may change before next ONNX release and in this case ONNX "
                   "Runtime will not guarantee backward compatibility. Current official support for domain "
                   f"{shown} is till opset {top}.")  # fmt: skip
        elif version <= 0:
            yield f"opset import of domain {domain or 'ai.onnx'!r} has version {version}: no operator resolves at a version below 1"


def _unknown_imports(model: ModelLike, registry: Registry) -> Iterator[str]:
    known = registry.domains | {"ai.onnx"}
    for domain, version in sorted(as_ir_model(model).opset_imports.items()):
        if domain not in known:
            yield (f"opset import of domain {domain!r} (version {version}): onnxruntime registers no operator in it "
                   "and the graph's session registers no custom-op library")  # fmt: skip


def _shape_rule(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
    """Standard ops whose inference refuses the shapes they get (contracts.shapes)."""
    from contracts.shapes import shapes_of  # deferred: pulls in numpy (contracts.shapes)

    ir_model = as_ir_model(model)
    return [Violation("ORT-SHAPE-001", text, node=node_label(node)) for node, text in shapes_of(ir_model).problems
            if schema_clean(ir_model, node)]  # fmt: skip


def _unknown_import_rule(version: str) -> ModelCheck:
    def check(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
        return [Violation("ORT-OPSET-002", text, severity="warning")
                for text in _unknown_imports(model, registry_for(version))]  # fmt: skip

    return check


def _node_rule(rule_id: str, version: str) -> ModelCheck:
    def check(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
        registry = registry_for(version)
        return [Violation(rid, text, node=node_label(node)) for node, rid, text in _problems(model, registry) if rid == rule_id]

    return check


def _opset_rule(version: str) -> ModelCheck:
    def check(model: ModelLike, _entries: Mapping[str, str]) -> list[Violation]:
        return [Violation("ORT-OPSET-001", text) for text in _opset_problems(model, registry_for(version))]

    return check


FAMILY = "schema"
"""The rule family of this module's rules (``q38 rules --family``)."""

_SCHEMA_SRC = (
    "ORT's graph resolve runs onnx's OpSchema::Verify on every node against the schema registered "
    "for the node's domain at the model's opset import (q38 mirrors the registry dumped from "
    "get_all_operator_schema(), contracts/schemas/ort-VERSION.json). "
)


# The schema rules' examples (ONNX text, onnx.parser): one com.microsoft GatedAdd or one standard
# op, each violating model one edit away from its passing one.
_EX_GATED_ADD = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[2,8] a, float[2,8] b, float[2,8] g) => (float[] y) {
  [ga] y = com.microsoft.GatedAdd (a, b, g)
}"""
_EX_RELU = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[2,8] x) => (float[] y) {
  [n0] y = Relu (x)
}"""
_EX_SOFTMAX = """<ir_version: 10, opset_import: ["" : 21]>
g (float[2,8] x) => (float[] y) {
  [n0] y = Softmax <axis: int = 1> (x)
}"""
_EX_CAUSAL_CONV = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float[1,4,5] x, float[4,1,3] w) => (float[] y, float[] st) {
  [cc] y, st = com.microsoft.CausalConvWithState <ndim: int = 1> (x, w, "", "")
}"""
_EX_DSA = """<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
g (float16[1,2,64] q, int32[2,4] si, int32[2] sc, int32[1] sk, int32[1] tsl) => (float16[] out) {
  [dsa] out = com.microsoft.DynamicSparseAttention <kv_num_heads: int = 2, num_heads: int = 4>
      (q, "", "", "", "", "", "", si, sc, sk, tsl)
}"""
_EX_MATMUL = """<ir_version: 10, opset_import: ["" : 21]>
g (float[2,3] a, float[3,5] b) => (float[] y) {
  [mm] y = MatMul (a, b)
}"""
_EX_OPSET_10 = """<ir_version: 10, opset_import: ["" : 10]>
g (float[2,8] x) => (float[] y) {
  [n0] y = Relu (x)
}"""


# (id, summary, documentation, examples) of the per-node schema rules, one record per id and
# mirrored version
_NODE_RULES: tuple[tuple[str, str, RuleDoc, GraphExamples], ...] = (
    ("ORT-SCHEMA-001", "the op is registered for its domain at the model's opset import", RuleDoc(
        _SCHEMA_SRC + "A node whose op has no schema for its domain at that version fails with "
        "'No Op registered for OP with domain_version of N' (or 'Fatal error: DOMAIN:OP(-1) is "
        "not a registered function/op').",
        'opset_import { domain: "" version: 0 }  node: Gather(...)  -> No Op registered for Gather with domain_version of 0',
        "Use an op that exists at the imported opset (or raise the opset import to one that has it).",
    ), GraphExamples.edited(_EX_RELU, ("Relu", "com.microsoft.Bogus"))),
    ("ORT-SCHEMA-002", "each input type is within its type parameter's allowed types", RuleDoc(
        _SCHEMA_SRC + "Each input's element type must be one of its type parameter's allowed "
        "types: 'Type Error: Type 'tensor(T)' of input parameter (X) of operator (OP) in node (N) "
        "is invalid.'",
        "Relu(x: tensor(int8)) at an opset whose Relu allows only float types",
        "Cast the input to an allowed type (the schema lists them) or use an op that accepts it.",
    ), GraphExamples.edited(_EX_RELU, ("float[2,8] x) => (float[] y)", "uint8[2,8] x) => (uint8[] y)"))),
    ("ORT-SCHEMA-003", "every attribute is known to the op's schema", RuleDoc(
        _SCHEMA_SRC + "An attribute the op's schema does not declare fails with 'Unrecognized "
        "attribute: NAME for operator OP'.",
        "Relu(x) with attribute alpha=0.1",
        "Remove the attribute, or use the op that declares it (LeakyRelu has alpha).",
    ), GraphExamples.edited(_EX_SOFTMAX, ("axis", "bogus"))),
    ("ORT-SCHEMA-004", "input and output counts are within the schema's bounds", RuleDoc(
        _SCHEMA_SRC + "The number of inputs and outputs must lie within the schema's bounds "
        "(optional and variadic slots included), otherwise the node fails verification.",
        "Relu(a, b)  (Relu takes exactly one input)",
        "Give the op the number of inputs and outputs its schema declares.",
    ), GraphExamples.edited(_EX_SOFTMAX, ("(float[] y)", "(float[] y, float[] y1)"), ("y = ", "y, y1 = "))),
    ("ORT-SCHEMA-005", "a type parameter is bound to one type", RuleDoc(
        _SCHEMA_SRC + "All inputs and outputs bound to one type parameter must have one type: "
        "'Type Error: Type parameter (T) of Optype (OP) bound to different types ...'.",
        "Add(a: tensor(float), b: tensor(float16))",
        "Cast the inputs so every slot of the type parameter has the same element type.",
    ), GraphExamples.edited(_EX_GATED_ADD, ("float[2,8] b", "float16[2,8] b"))),
    ("ORT-SCHEMA-006", "every attribute has the type the schema declares", RuleDoc(
        _SCHEMA_SRC + "Every attribute must have the type the schema declares (an int where a "
        "float is declared, a graph where a tensor is, a Constant without data), otherwise ORT "
        "refuses the node with its attribute type error.",
        "Gather(data, indices) with attribute axis given as a float (axis=1.0)",
        "Write the attribute with its declared type (axis as an INT).",
    ), GraphExamples.edited(_EX_CAUSAL_CONV, ("ndim: int = 1", "ndim: ints = [3]"))),
    ("ORT-SCHEMA-007", "required attributes are present", RuleDoc(
        _SCHEMA_SRC + "A required attribute that is absent fails with 'Required attribute NAME "
        "is missing.'",
        "com.microsoft GroupQueryAttention(...) without num_heads",
        "Add the required attribute with its intended value.",
    ), GraphExamples.edited(_EX_DSA, (", num_heads: int = 4", ""))),
    ("ORT-SCHEMA-008", "an empty input/output name only in an optional slot", RuleDoc(
        _SCHEMA_SRC + "An empty input or output name means 'absent' and is allowed only in an "
        "optional slot; in a required slot ORT refuses the node.",
        'MatMul("", w)  (empty first input)',
        "Wire a value into every required slot; leave only optional slots empty.",
    ), GraphExamples.edited(_EX_GATED_ADD, ("(a, b, g)", '(a, "", g)'))),
    ("ORT-SCHEMA-009", "a declared output type agrees with the type the schema binds", RuleDoc(
        _SCHEMA_SRC + "A graph output or value_info that declares a type different from the one "
        "the schema binds for the producing node fails with 'Type Error: Type (T) of output arg "
        "(Y) of node (N) does not match expected type (U).'",
        "y = Relu(x: tensor(float)) with value_info y: tensor(float16)",
        "Fix the declared type (or insert a Cast) so it matches what the op produces.",
    ), GraphExamples.edited(_EX_GATED_ADD, ("(float[] y)", "(float16[] y)"))),
    ("ORT-SCHEMA-010", "the op's resolved schema is not deprecated", RuleDoc(
        _SCHEMA_SRC + "A node whose schema at the imported opset is deprecated is refused: 'Op "
        "registered for OP is deprecated in domain_version of N'.",
        'opset_import { domain: "" version: 10 }  node: Upsample(...)',
        "Replace the op with its successor (Upsample -> Resize) or import an opset where it is not deprecated.",
    ), GraphExamples.edited(_EX_OPSET_10, ("Relu", "Scale"))),
    ("ORT-SCHEMA-011", "an op of a domain onnxruntime does not know needs a registered custom-op library", RuleDoc(
        "A node of a domain onnxruntime does not know can only run if the session registers a "
        "custom-op library that provides it; otherwise ORT fails with 'Fatal error: DOMAIN:OP(-1) "
        "is not a registered function/op'.",
        'node { domain: "qwen38.plane" op_type: "Plane" }  with no library in the config',
        "Ship the custom-op library in libs/ and name it in the config (q38 build --lib-NAME), or replace the op.",
    ), GraphExamples.edited(_EX_RELU, ('"com.microsoft" : 1]>', '"com.example" : 1]>'), ("Relu", "com.example.Bogus"))),
)


def _version_ranges() -> list[tuple[str, OrtVersions]]:
    versions = available_versions()
    out = []
    for i, version in enumerate(versions):
        since = version if i > 0 else None
        until = versions[i + 1] if i + 1 < len(versions) else None
        out.append((version, OrtVersions(since=since, until=until)))
    return out


def _rules() -> tuple[Rule, ...]:
    rules = []
    for version, span in _version_ranges():
        source = _SRC.format(v=version)
        rules.append(Rule("ORT-OPSET-001", "opset imports: present, >= 1, within what onnxruntime supports",
                          source + "; model_load_utils.h ValidateOpsetForDomain", "cpu-session", "graph",
                          _opset_rule(version), span, family=FAMILY, doc=RuleDoc(
            "ORT refuses at model load a model without any opset import ('Missing opset in the model. "
            "All ModelProtos MUST have at least one entry ...'), a default-domain import below 1 (no "
            "operator resolves), and an import above what this onnxruntime supports ('ONNX Runtime "
            "only *guarantees* support for models stamped with official released onnx opset versions "
            "...').",
            'opset_import { domain: "" version: 0 }',
            "Stamp the graph with a released opset (e.g. 'ai.onnx' 21) that the installed onnxruntime supports.",
        ), examples=GraphExamples.edited(_EX_GATED_ADD, ('"" : 21', '"" : 10000'))))  # fmt: skip
        rules.append(Rule("ORT-OPSET-002", "every imported domain is one onnxruntime knows, or a custom-op "
                          "library of the graph's session provides it", source, "cpu-session", "graph",
                          _unknown_import_rule(version), span, family=FAMILY, doc=RuleDoc(
            "onnxruntime ignores an opset import that no node uses, so an import of a domain it registers "
            "no operator in loads; a node of that domain is refused (ORT-SCHEMA-011). Such an import "
            "is the trace of a custom-op library the config does not name (custom_ops_library / libs) "
            "or an exporter's leftover: a warning, dropped when the session registers a custom-op library.",
            'opset_import { domain: "com.example" version: 1 }  with no custom-op library configured',
            "Remove the unused import, or name the custom-op library in the config's session options.",
            severity="warning",
        ), examples=GraphExamples.edited(_EX_GATED_ADD, ('"com.microsoft" : 1', '"com.microsoft" : 1, "com.example" : 1'))))  # fmt: skip
        rules.extend(Rule(rule_id, summary, source, "cpu-session", "graph", _node_rule(rule_id, version), span,
                          family=FAMILY, doc=doc, examples=examples)
                     for rule_id, summary, doc, examples in _NODE_RULES)  # fmt: skip
    return tuple(rules)


RULES: tuple[Rule, ...] = (
    *_rules(),
    Rule("ORT-SHAPE-001", "standard ops' shape inference accepts the shapes ORT infers for their inputs "
         "(MatMul / broadcast dims, Reshape targets, Split sizes, Transpose perm, axes in range, ...)",
         "onnx shape inference functions, as ORT's graph resolve runs them; probed 1.32.0", "cpu-session",
         "graph", _shape_rule, family=FAMILY, doc=RuleDoc(
        "While resolving the graph ORT runs onnx's shape inference of each standard op on the "
        "shapes it infers for the inputs; incompatible MatMul / broadcast dims, a Reshape target "
        "that does not fit, Split sizes that do not sum, a bad Transpose perm or an axis out of "
        "range fail the session with the op's shape-inference error; so does an If whose two branches, "
        "or whose branches and node, disagree on the number of outputs.",
        "MatMul(a: [2, 3], b: [4, 5])",
        "Make the shapes agree (fix the producer, the initializer or the attribute named in the message).",
    ), examples=GraphExamples.edited(_EX_MATMUL, ("float[3,5] b", "float[4,5] b"))),
)
