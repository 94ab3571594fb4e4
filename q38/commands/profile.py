"""``q38 profile PKG -o expert-profile.bin``: count which experts a workload selects (issue 18).

Module level imports the standard library only; ``run`` imports the profiler.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from q38.commands._options import nonneg_int, positive_int, say_wrote
from q38.errors import FlagError, ProfileError

if TYPE_CHECKING:
    from q38.offload.convert import OffloadReport
    from q38.package.profile import ExpertProfile
    from q38.profile.replay import ReplayReport
    from q38.profile.run import ProfileRun

__all__ = ["register", "run"]

_DESCRIPTION = (
    "Run a package on the CPU (its cpu variant, or a real -e cpu export) over a workload and count, "
    "per QMoE node (decoder layers, then the MTP where it runs), how often each expert is selected; "
    "write the counts as an STRP v1 expert profile for q38 offload --expert-profile. Workload: "
    "--prompts FILE (one prompt a line: token ids, or text when onnxruntime-genai can load the "
    "package's tokenizer) or --prompt-count random prompts from --seed; each continued greedily for "
    "--tokens tokens. With --plan, also print what an offload with --total-resident-slots N would "
    "keep resident and its expected hit rate, without converting. Deterministic: the same package, "
    "workload and --threads give a byte-identical profile."
)






def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``q38 profile`` to the command line."""
    p = sub.add_parser("profile", parents=[common], help="measure which experts a workload selects (STRP v1)",
                       description=_DESCRIPTION)  # fmt: skip
    p.add_argument("package", metavar="PKG", help="package directory (either surface; never modified)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the profile here (STRP v1; must not exist; default: not written, only with --plan)")
    work = p.add_argument_group("workload")
    work.add_argument("--prompts", metavar="FILE", help="one prompt a line: token ids (5 6 7 or 5,6,7) or text (default: --prompt-count random prompts)")
    work.add_argument("--prompt-count", type=positive_int, default=8, metavar="N",
                      help="random prompts when no --prompts file is given")
    work.add_argument("--prompt-length", type=positive_int, default=16, metavar="L", help="ids per random prompt")
    work.add_argument("--tokens", type=positive_int, default=16, metavar="N", help="greedy tokens generated per prompt")
    work.add_argument("--seed", type=nonneg_int, default=0, help="seed of the random prompts")
    work.add_argument("--threads", type=positive_int, default=1, metavar="N",
                      help="onnxruntime intra-op threads (the profile is byte-identical for the same N)")
    plan = p.add_argument_group("plan (print what q38 offload would keep resident; converts nothing)")
    plan.add_argument("--plan", action="store_true", help="print the slot plan and its expected hit rate")
    plan.add_argument("--expert-profile", metavar="FILE",
                      help="plan from this STRP v1 profile instead of running the workload (default: run it)")
    plan.add_argument("--total-resident-slots", type=nonneg_int, metavar="N", help="total resident slots to plan (default: not capped)")
    plan.add_argument("--uniform-profile-slots", action="store_true", help="the same share for every layer")
    plan.add_argument("--min-slots-per-layer", type=nonneg_int, default=0, metavar="M", help="per-layer floor")
    plan.add_argument("--offload-mode", choices=("auto", "required"), default="auto",
                      help="how ineligible nodes are treated (auto: kept on the GPU, all their selections hit)")
    # issue 29: the selection trace and its replay against LRU, LFU and Belady (q38/profile/replay.py)
    plan.add_argument("--trace-out", metavar="FILE", help="write the measured selection trace here (JSON; docs/offload.md; default: not written)")
    plan.add_argument("--trace", metavar="FILE", help="with --expert-profile: replay this selection trace (default: no replay)")
    ort = p.add_argument_group("onnxruntime's expert counter state (session.moe_expert_counter_state_file)")
    ort.add_argument("--ort-state", metavar="FILE", help="also write the measured counts as ORT's state file (moe_expert_state 1; default: not written)")
    ort.add_argument("--from-ort-state", metavar="FILE",
                     help="convert ORT's state file for PKG's decoder into the -o STRP v1 profile (runs no workload; default: measure a workload)")
    plan.add_argument("--coverage", metavar="STEM", help="with --plan and a trace: write STEM.json and STEM.png (coverage curve; default: not written)")
    p.set_defaults(run=run)


def _check_args(args: argparse.Namespace) -> None:

    if args.from_ort_state is not None and (args.output is None or args.plan or args.ort_state is not None):
        raise FlagError("--from-ort-state FILE writes -o FILE only (no --plan, no --ort-state)")
    if args.ort_state is not None and (args.expert_profile is not None or os.path.lexists(args.ort_state)):
        raise FlagError(f"--ort-state {args.ort_state}: exists, or there is no measured profile to write"
                        if args.expert_profile is None else "--ort-state writes measured counts: not with --expert-profile")

    if args.output is None and not args.plan:
        raise FlagError("-o FILE is required (or --plan to print a plan only)")
    if args.expert_profile is not None and not args.plan:
        raise FlagError("--expert-profile is read by --plan only")
    if args.expert_profile is not None and args.output is not None:
        raise FlagError("--expert-profile and -o: a plan from a profile file measures nothing to write")
    if args.plan and args.total_resident_slots is None:
        raise FlagError("--plan needs --total-resident-slots N")
    if not args.plan and (args.total_resident_slots is not None or args.uniform_profile_slots or args.min_slots_per_layer):
        raise FlagError("--total-resident-slots, --uniform-profile-slots and --min-slots-per-layer need --plan")
    if args.output is not None and os.path.lexists(args.output):
        raise FlagError(f"-o {args.output}: exists (q38 never replaces a file)")
    _check_trace_args(args)


def _check_trace_args(args: argparse.Namespace) -> None:

    if args.trace is not None and args.expert_profile is None:
        raise FlagError("--trace is replayed with --plan --expert-profile (a measuring run has its own trace)")
    if args.trace_out is not None and args.expert_profile is not None:
        raise FlagError("--trace-out writes a measured trace: it cannot go with --expert-profile")
    if args.coverage is not None and (not args.plan or (args.expert_profile is not None and args.trace is None)):
        raise FlagError("--coverage needs --plan and a trace (a measuring run, or --trace FILE)")
    for path in [args.trace_out, *((f"{args.coverage}.json", f"{args.coverage}.png") if args.coverage else ())]:
        if path is not None and os.path.lexists(path):
            raise FlagError(f"{path}: exists (q38 never replaces a file)")


def _write_new(path: Path, data: bytes) -> None:
    """Write a new file atomically, never replacing one (:func:`q38.package.io.staging.write_file_atomic`)."""
    # deferred: q38.package stays out of q38 --help
    from q38.package.io.staging import write_file_atomic

    write_file_atomic(path, data, replace=False)


def run(args: argparse.Namespace) -> int:
    """Measure (or read) an expert profile, and write, plan and replay what the flags ask for.

    ``--from-ort-state`` converts onnxruntime's state file instead. Returns 0; a profile that
    cannot be measured or written raises ProfileError (exit 2).
    """
    # deferred: pulls numpy into q38 --help (q38.package.profile)
    from q38.package.profile import encode_profile, read_profile

    _check_args(args)
    measured = None
    if args.from_ort_state is not None:
        return _from_ort_state(args)
    if args.expert_profile is not None:
        profile = read_profile(Path(args.expert_profile), what="--expert-profile")
    else:
        measured = _measure(args)
        profile = measured.profile
        if args.output is not None:
            try:
                _write_new(Path(args.output), encode_profile(profile))
            except OSError as exc:
                raise ProfileError(f"-o {args.output}: cannot write it: {exc.strerror or exc}") from None
    plan = _plan(args, profile) if args.plan else None
    replayed = _replay(args, profile, measured, plan) if plan is not None else None
    if measured is not None and args.trace_out is not None:
        _write_trace(args.trace_out, measured)
    if measured is not None and args.ort_state is not None:
        _write_ort_state(args, measured)
    if args.json:
        doc: dict[str, Any] = {"output": args.output}
        if measured is not None:
            doc["profile"] = measured.to_dict()
        if plan is not None:
            doc["plan"] = {"resident_slots": plan.resident_slots, "hit_rates": [h.to_dict() for h in plan.hit_rates]}
            if replayed is not None:
                doc["plan"]["replay"] = replayed.to_dict()
        print(json.dumps(doc, indent=2, sort_keys=True))
        _say_written(args, measured, replayed)
        return 0
    if measured is not None:
        total = sum(measured.rows_processed.values())
        print(f"q38 profile: measured: {measured.counts.shape[0]} layers x {measured.counts.shape[1]} experts, "
              f"{measured.prompts} prompts, {measured.generated} tokens generated, {total} rows processed "
              f"({', '.join(f'{g} {n}' for g, n in measured.rows_processed.items())}), {measured.seconds:.1f} s")  # fmt: skip
    if plan is not None:
        # deferred: pulls numpy into q38 --help (q38.offload.hitrate)
        from q38.offload.hitrate import format_reports

        print("\n".join(format_reports(plan.hit_rates)))
        if replayed is not None:
            print("\n".join(replayed.lines()))
    _say_written(args, measured, replayed)
    return 0


def _say_written(args: argparse.Namespace, measured: ProfileRun | None, replayed: ReplayReport | None) -> None:
    """The last line: every file this run wrote (none: a --plan of a given profile writes nothing)."""
    written = []
    if measured is not None:
        written += [p for p in (args.output, args.trace_out, args.ort_state) if p is not None]
    if replayed is not None and args.coverage is not None:
        written += [f"{args.coverage}.json", f"{args.coverage}.png"]
    if written:
        say_wrote("profile", ", ".join(written), machine=args.json)


def _replay(args: argparse.Namespace, profile: ExpertProfile, measured: ProfileRun | None,
            plan: OffloadReport) -> ReplayReport | None:
    """The plan's first tier replayed against LRU, LFU and Belady over the trace (None without one)."""
    import numpy as np  # deferred: heavy; keeps q38 --help free of numpy

    # deferred: pulls numpy into q38 --help (q38.profile.replay)
    from q38.profile.replay import plot_coverage, read_trace, replay_plan

    counts = np.asarray(profile.counts)
    if measured is not None:
        trace = list(measured.trace)
        tokens = [measured.rows_processed[s.graph] for s in measured.sites]
    elif args.trace is not None:
        trace, tokens = read_trace(Path(args.trace), rows=counts.shape[0], experts=counts.shape[1])
    else:
        return None
    if not plan.hit_rates:
        return None
    report = replay_plan(Path(args.package), plan.hit_rates[0], counts, trace, tokens)
    if args.coverage is not None:
        doc = {"coverage": report.to_dict()["coverage"], "overall": report.to_dict()["overall"]}
        _write_new(Path(f"{args.coverage}.json"), (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
        plot_coverage(report, Path(f"{args.coverage}.png"), f"coverage: {Path(args.package).name}")
    return report


def _write_trace(path: str, measured: ProfileRun) -> None:
    """Write the measured run's selection trace to ``path`` (never replacing a file)."""
    # deferred: pulls numpy into q38 --help (q38.profile.replay)
    from q38.profile.replay import trace_bytes, trace_document

    labels = [s.label for s in measured.sites]
    tokens = [measured.rows_processed[s.graph] for s in measured.sites]
    doc = trace_document(measured.trace, labels, tokens, int(measured.counts.shape[1]))
    try:
        _write_new(Path(path), trace_bytes(doc))
    except OSError as exc:
        raise ProfileError(f"--trace-out {path}: cannot write it: {exc.strerror or exc}") from None


def _measure(args: argparse.Namespace) -> ProfileRun:
    """Run the workload (--prompts FILE, else synthetic prompts from --seed) over the package on CPU."""
    # deferred: pulls numpy into q38 --help (q38.profile.run)
    from q38.profile.run import open_runnable, profile_package

    # deferred: pulls numpy into q38 --help (q38.profile.workload)
    from q38.profile.workload import Workload, og_tokenizer, read_prompts, synthetic_prompts

    root = Path(args.package)
    pkg = open_runnable(root)
    if args.prompts is not None:
        prompts = read_prompts(Path(args.prompts), vocab=pkg.vocab or 2**31, tokenizer=og_tokenizer(root))
        source = f"--prompts {args.prompts}"
    else:
        if not pkg.vocab:

            raise ProfileError(f"{root}: the config has no vocab_size: give --prompts FILE")
        prompts = synthetic_prompts(args.prompt_count, args.prompt_length, pkg.vocab, args.seed)
        source = f"--seed {args.seed}"
    return profile_package(pkg, Workload(prompts, args.tokens, source), threads=args.threads)


def _plan(args: argparse.Namespace, profile: ExpertProfile) -> OffloadReport:
    """The offload plan (resident slots, hit rates) ``profile`` gives, as ``q38 offload`` would make it."""
    # deferred: pulls numpy into q38 --help (q38.offload.session_plan)
    from q38.offload.convert import preview_offload

    # deferred: pulls numpy into q38 --help (q38.package.profile)
    from q38.offload.options import OffloadOptions

    options = OffloadOptions(
        mode=args.offload_mode,
        expert_profile=args.expert_profile or "(measured)",
        total_resident_slots=args.total_resident_slots,
        uniform_profile_slots=args.uniform_profile_slots,
        min_slots_per_layer=args.min_slots_per_layer,
    )
    return preview_offload(Path(args.package), options, profile=profile)


def _write_ort_state(args: argparse.Namespace, measured: ProfileRun) -> None:
    """The measured counts of the decoder's rows as onnxruntime's expert counter state file."""
    # deferred: pulls numpy into q38 --help (q38.profile.ort_state)
    from q38.profile.ort_state import decoder_nodes, encode_state

    nodes, _experts = decoder_nodes(Path(args.package))
    names = [s.name for s in measured.sites]
    rows = [names.index(n.name) for n in nodes if n.name in names]
    if len(rows) != len(nodes):
        raise ProfileError(f"{args.package}: the profile's rows do not name every QMoE node of the decoder")
    try:
        _write_new(Path(args.ort_state), encode_state(nodes, measured.counts[rows]))
    except OSError as exc:
        raise ProfileError(f"--ort-state {args.ort_state}: cannot write it: {exc.strerror or exc}") from None


def _from_ort_state(args: argparse.Namespace) -> int:
    """``--from-ort-state FILE PKG -o OUT``: onnxruntime's state file as an STRP v1 profile."""
    # deferred: pulls numpy into q38 --help (q38.package.profile)
    from q38.package.io.files import read_text_bounded

    # deferred: pulls numpy into q38 --help (q38.package.profile)
    from q38.package.profile import ExpertProfile, encode_profile

    # deferred: pulls numpy into q38 --help (q38.profile.ort_state)
    from q38.profile.ort_state import decoder_nodes, parse_state, state_to_counts

    source = f"--from-ort-state {args.from_ort_state}"
    text = read_text_bounded(Path(args.from_ort_state), what="--from-ort-state", limit=1 << 28, error=ProfileError)
    state = parse_state(text, source=source)
    nodes, experts = decoder_nodes(Path(args.package))
    counts = state_to_counts(state, nodes, experts, source=source)
    try:
        _write_new(Path(args.output), encode_profile(ExpertProfile(counts)))
    except OSError as exc:
        raise ProfileError(f"-o {args.output}: cannot write it: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps({"output": args.output, "rows": len(nodes), "experts": experts,
                          "selections": int(counts.sum())}, indent=2, sort_keys=True))  # fmt: skip
    else:
        print(f"q38 profile: wrote {args.output}: {len(nodes)} rows x {experts} experts from {args.from_ort_state} "
              f"({int(counts.sum())} selections)")  # fmt: skip
    return 0
