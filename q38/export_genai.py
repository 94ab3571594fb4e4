"""``q38 export-genai``: a directory that released onnxruntime-genai (0.18.0) loads on CPU.

The export is a plain GenAI model directory for the package's ``cpu``-variant target graph:

* ``genai_config.json`` with ``model.type = "qwen3_5_moe_text"`` (a type 0.18.0 accepts for a
  hybrid GatedDeltaNet/attention decoder, reference qwen38-graph-structure.md §3), the KV, conv
  and recurrent state name templates, string provider options (none by default: CPU), and none
  of the q38-only keys (``qwen38_graph``, ``runtime_profiles``, ``shared_initializers``, the
  indexer names, ``session.*`` config entries, ``custom_ops_library``);
* the target graph and every external-data file it references, placed with
  the shared placement policy (:class:`q38.package.Placer`: reflink, else copy; hard links only with `--link hardlink`).

Nothing is loaded from the weights: the graph is parsed without its external data, checked
(every contrib op has a CPU kernel in the installed onnxruntime, probed once and cached by
:mod:`q38.ort_kernels`; every graph input is something GenAI feeds, every past
state has its present twin), and placed unchanged. GenAI generates from token ids without a
tokenizer, so none is written. The output is staged and renamed into place; a failure leaves
nothing behind and the package is never modified.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from q38._ops import MS_DOMAIN, ONNX_DOMAIN
from q38.errors import ExportError
from q38.export_plan import ExportPlan, write_export
from q38.ort_kernels import cpu_kernels
from q38.package import (
    SurfaceVisitor,
    check_destination,
    check_output_outside,
    load_graph,
    open_any,
    visit,
)
from q38.package.graph_memo import active_memo
from q38.package.io.jsonio import dumps_json
from q38.package.io.links import LinkPolicy
from q38.package.io.paths import resolve_inside

if TYPE_CHECKING:
    import onnx_ir as ir

    from q38.package.genai.package import GenaiPackage
    from q38.package.interface import AnyPackage
    from q38.package.v12b.config import Config
    from q38.package.v12b.reader import V12bPackage

__all__ = ["GENAI_MODEL_TYPE", "ExportError", "ExportResult", "export_genai", "genai_config"]

GENAI_MODEL_TYPE: Final = "qwen3_5_moe_text"
# The config name templates GenAI 0.18.0 understands for these graphs (key -> default name).
_SCALAR_INPUTS: Final = ("input_ids", "attention_mask", "position_ids")
_STATE_KINDS: Final = (("key", "key"), ("value", "value"), ("conv", "conv"), ("recurrent", "recurrent"))
_SEARCH_KEYS_018: Final = frozenset(
    {"max_length", "min_length", "do_sample", "top_k", "top_p", "temperature", "num_beams", "repetition_penalty"}
)


@dataclass(frozen=True)
class ExportResult:
    """What ``q38 export-genai`` wrote: the graph, every file with its link mode, and what changed."""

    out: Path
    graph: str
    files: dict[str, str]  # relative name -> link mode
    states: dict[str, int]  # kind -> number of past inputs (v12b packages)
    rewrites: tuple[str, ...] = ()  # config changes made for 0.18.0 (builder packages)
    dropped: tuple[str, ...] = ()  # graph sections left out, with why (builder packages)


def _template_re(template: str) -> re.Pattern[str]:
    if template.count("%d") != 1:
        raise ExportError(f"name template {template!r} must contain exactly one %d")
    head, tail = template.split("%d")
    return re.compile(f"^{re.escape(head)}([0-9]+){re.escape(tail)}$")


def _io_names(decoder_inputs: dict[str, str], decoder_outputs: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The 0.18.0 inputs/outputs sections: q38's names, minus what 0.18.0 rejects."""
    inputs = {k: decoder_inputs.get(k, k) for k in _SCALAR_INPUTS}
    outputs = {"logits": decoder_outputs.get("logits", "logits")}
    defaults = {"key": ("past_key_values.%d.key", "present.%d.key"),
                "value": ("past_key_values.%d.value", "present.%d.value"),
                "conv": ("past.%d.conv", "present.%d.conv"),
                "recurrent": ("past.%d.recurrent", "present.%d.recurrent")}
    for kind, _ in _STATE_KINDS:
        past_default, present_default = defaults[kind]
        inputs[f"past_{kind}_names"] = decoder_inputs.get(f"past_{kind}_names", past_default)
        outputs[f"present_{kind}_names"] = decoder_outputs.get(f"present_{kind}_names", present_default)
    return inputs, outputs


def _check_graph(model: ir.Model, graph_name: str, inputs: dict[str, str], outputs: dict[str, str]) -> dict[str, int]:
    """Refuse a graph 0.18.0 cannot run on CPU; returns the state counts per kind."""
    kernels = cpu_kernels()
    for node in model.graph:
        domain = node.domain or ONNX_DOMAIN
        if domain in (ONNX_DOMAIN, "ai.onnx"):
            continue
        if domain != MS_DOMAIN:
            raise ExportError(
                f"{graph_name}: node {node.name or node.op_type!r} uses custom domain {domain!r} "
                f"({node.op_type}); GenAI 0.18.0 on CPU cannot run custom-op lineage graphs"
            )
        if not kernels.has_node(node):
            dtype = kernels.node_dtype(node)
            which = f" for {dtype}" if dtype and kernels.has(node.op_type, MS_DOMAIN) else ""
            raise ExportError(
                f"{graph_name}: node {node.name or node.op_type!r} is {MS_DOMAIN}::{node.op_type}, "
                f"which has no onnxruntime {kernels.ort_version} CPU kernel{which}"
            )
    graph_inputs = [v.name or "" for v in model.graph.inputs]  # a loaded graph input always has a name
    graph_outputs = {v.name for v in model.graph.outputs}
    fed = {inputs[k] for k in _SCALAR_INPUTS}
    if inputs["input_ids"] not in graph_inputs:
        raise ExportError(f"{graph_name}: no graph input {inputs['input_ids']!r} (model.decoder.inputs.input_ids)")
    if outputs["logits"] not in graph_outputs:
        raise ExportError(f"{graph_name}: no graph output {outputs['logits']!r} (model.decoder.outputs.logits)")
    ids = next(v for v in model.graph.inputs if v.name == inputs["input_ids"])
    if ids.shape is not None and len(ids.shape) == 2 and isinstance(ids.shape[1], int):
        raise ExportError(
            f"{graph_name}: input {ids.name!r} has a fixed sequence length {ids.shape[1]} (a multi-draft verify "
            "graph); GenAI needs a decoder with a dynamic sequence length (export the package before q38 offload)"
        )
    patterns = {kind: _template_re(inputs[f"past_{kind}_names"]) for kind, _ in _STATE_KINDS}
    counts = dict.fromkeys(patterns, 0)
    for name in graph_inputs:
        if name in fed:
            continue
        for kind, pattern in patterns.items():
            match = pattern.match(name)
            if match:
                twin = outputs[f"present_{kind}_names"].replace("%d", match.group(1))
                if twin not in graph_outputs:
                    raise ExportError(f"{graph_name}: state input {name!r} has no present output {twin!r}")
                counts[kind] += 1
                break
        else:
            raise ExportError(
                f"{graph_name}: graph input {name!r} is not fed by onnxruntime-genai 0.18.0 "
                "(not input_ids/attention_mask/position_ids or a key/value/conv/recurrent state)"
            )
    return counts


def genai_config(cfg: Config, graph_name: str, *, provider: str = "cpu") -> dict[str, Any]:
    """The 0.18.0 ``genai_config.json`` document for q38 config ``cfg``.

    Only what 0.18.0 reads is written: the decoder's scalar session options, the ``provider``'s
    options (none for CPU), the search keys it knows, ``max_length`` capped at the context length.
    """
    m = cfg.model
    d = m.decoder
    inputs, outputs = _io_names(d.inputs, d.outputs)
    so: dict[str, Any] = {"log_id": d.session_options.log_id or "q38"}
    for key in ("intra_op_num_threads", "inter_op_num_threads", "graph_optimization_level", "log_severity_level"):
        value = getattr(d.session_options, key)
        if value is not None:
            so[key] = value
    providers: list[dict[str, dict[str, str]]] = []
    if provider != "cpu":
        providers = [{p.name: dict(p.options)} for p in d.session_options.provider_options if p.name == provider]
        if not providers:
            providers = [{provider: {}}]
    so["provider_options"] = providers
    search = {k: v for k, v in cfg.search.items() if k in _SEARCH_KEYS_018}
    search["max_length"] = min(int(search.get("max_length", m.context_length)), m.context_length)
    return {
        "model": {
            "type": GENAI_MODEL_TYPE,
            "bos_token_id": m.bos_token_id,
            "eos_token_id": list(m.eos_token_id),
            "pad_token_id": m.pad_token_id,
            "vocab_size": m.vocab_size,
            "context_length": m.context_length,
            "decoder": {
                "filename": graph_name,
                "session_options": so,
                "head_size": d.head_size,
                "hidden_size": d.hidden_size,
                "num_attention_heads": d.num_attention_heads,
                "num_hidden_layers": d.num_hidden_layers,
                "num_key_value_heads": d.num_key_value_heads,
                "inputs": inputs,
                "outputs": outputs,
            },
        },
        "search": search,
    }


def export_genai(
    src: Path | str, out: Path | str, *, link: str = "auto", provider: str = "cpu", digest: bool = False
) -> ExportResult:
    """Export ``src`` to a GenAI 0.18.0 model directory ``out``.

    ``src`` is a cpu-variant q38 package (v12b surface: the config is written anew, the target
    graph and its data placed) or a package the onnxruntime-genai builder wrote (genai surface:
    passed through, see :mod:`q38.export_builder`). One flow: the surface's plan, then one writer.

    Raises:
        ExportError / PackageError: one line naming the file, node or key at fault.

    """
    src, out = Path(src), Path(out)
    check_destination(out, what="output")
    check_output_outside(Path(out), [Path(src)])
    plan = visit(open_any(src), _Planner(src, link=LinkPolicy(link), provider=provider, digest=digest))
    files = write_export(plan, out)
    return ExportResult(out, plan.graph, files, plan.states, plan.rewrites, plan.dropped)


class _Planner(SurfaceVisitor[ExportPlan]):
    """One export plan per surface; no other surface is exported.

    A q38 package: its target graph and a config written anew; a builder package: passed through.
    """

    def __init__(self, src: Path, *, link: LinkPolicy, provider: str, digest: bool) -> None:
        self.src, self.link, self.provider, self.digest = src, link, provider, digest

    def v12b(self, package: V12bPackage) -> ExportPlan:
        """:func:`_plan_v12b_export`."""
        return _plan_v12b_export(package, link=self.link, provider=self.provider, digest=self.digest)

    def genai(self, package: GenaiPackage) -> ExportPlan:
        """:func:`q38.export_builder.plan_builder_export`."""
        # deferred: pulls in onnx_ir (q38.export_builder)
        from q38.export_builder import plan_builder_export

        return plan_builder_export(package, link=self.link, provider=self.provider, digest=self.digest)

    def other(self, package: AnyPackage) -> ExportPlan:
        """Refused: q38 export-genai exports q38 and builder packages."""
        raise ExportError(f"{self.src}: a {package.surface} package; q38 export-genai exports q38 and builder packages")


def _plan_v12b_export(opened: V12bPackage, *, link: LinkPolicy, provider: str, digest: bool) -> ExportPlan:
    """A q38 package's export: its target graph and data, and a config written for 0.18.0."""
    from q38.package.graphs import external_refs  # deferred: pulls in onnx (q38.package.graphs)

    package = opened.package
    src = package.root
    g = package.config.model.qwen38_graph
    if g.variant != "cpu":
        raise ExportError(
            f"{src}: {g.variant}-variant package; onnxruntime-genai 0.18.0 on CPU has no kernels for its "
            "QSA ops (export a cpu-variant package)"
        )
    if g.lineage != "contrib":
        raise ExportError(f"{src}: {g.lineage}-lineage package; GenAI 0.18.0 on CPU runs contrib-lineage graphs only")
    graph_dir = package.target_dir
    graph_rel = g.target
    graph_path = resolve_inside(graph_dir, graph_rel, what=f"{src}: target graph")
    model = load_graph(graph_path, root=graph_dir)
    for role in package.roles():  # a malformed sibling graph makes the whole package malformed
        if role != "target":
            package.load(role)
    inputs, outputs = _io_names(package.config.model.decoder.inputs, package.config.model.decoder.outputs)
    states = _check_graph(model, str(graph_path), inputs, outputs)
    locations = sorted({ref.location for ref in external_refs(model)})
    memo = active_memo()
    if memo is not None:  # placed unchanged: the output check judges this very model
        memo.keep_unchanged(model)
    graph_parent = Path(graph_rel).parent
    doc = genai_config(package.config, graph_rel, provider=provider)
    # A value strict JSON cannot carry (NaN, an infinity, a 65-bit integer) is refused at its key,
    # never written.
    text = dumps_json(doc, what="genai_config.json", error=ExportError)
    sources = {
        rel: (resolve_inside(graph_dir, rel, what=f"{src}: {rel}"), False)
        for rel in [graph_rel, *(str(graph_parent / loc) for loc in locations)]
    }
    return ExportPlan(graph_rel, sources, text, opened.placer(link, digest=digest), states=states)


def generate_tokens(model_dir: Path | str, prompt: list[int], new_tokens: int) -> list[int]:
    """Greedy generation with onnxruntime-genai on CPU (``Config.clear_providers()``)."""
    import onnxruntime_genai as og  # deferred: heavy, optional; only token generation needs it

    tokens: list[int] = []
    try:
        config = og.Config(str(model_dir))
        config.clear_providers()
        model = og.Model(config)
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + new_tokens, do_sample=False)
        generator = og.Generator(model, params)
        generator.append_tokens(np.asarray([prompt], dtype=np.int32))
        while not generator.is_done() and len(tokens) < new_tokens:
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
    except RuntimeError as exc:  # onnxruntime-genai reports every failure as RuntimeError
        raise ExportError(f"{model_dir}: onnxruntime-genai could not generate: {exc}") from None
    return tokens
