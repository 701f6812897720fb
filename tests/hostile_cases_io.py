"""Hostile cases of issue 37, part 5 ("nothing lost, no traceback"): an output naming the
command's own input, JSON nested past the parser's recursion, out-of-range integers, CSVs
above their row limit, truncated results folders and a full disk.  The bases and helpers
are hostile_cases.py's."""
from __future__ import annotations

from tests.hostile_cases import (
                           ANALYTIC,
                           PLAN,
                           PROFILE,
                           Case,
                           dump_yaml,
                           run,
                           scenario,
)

JSONL = '{"prompt": "a b c", "output": "d e"}\n'
TRACE = "arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n"
TRACE_SCENARIO = scenario("workload", {"trace": "t.csv"})
DEEP_JSON = "[" * 100_000 + "]" * 100_000       # past the JSON decoder's recursion limit
# one row above each limit (calibrate.measured.MAX_MEASUREMENT_ROWS, workloads.workload.
# MAX_REQUESTS): refused from a line count, before pandas parses a byte
KERNEL_CSV_TOO_LONG = "time_stats.emb.median\n" + "1\n" * 200_001
TRACE_TOO_LONG = "arrival_s,prompt_tokens,output_tokens\n" + "0,1,1\n" * 1_000_001

IO_CASES: list[Case] = [
    # ---- an output that is one of the command's inputs (even with --overwrite) ----
    Case("clash-tokenize-same-file", ("tokenize", "in.jsonl", "-o", "in.jsonl", "--overwrite",
                                      "--tokenizer", "words"), "is the input",
         {"in.jsonl": JSONL}),
    Case("clash-tokenize-dotdot", ("tokenize", "in.jsonl", "-o", "./sub/../in.jsonl",
                                   "--overwrite", "--tokenizer", "words"), "is the input",
         {"in.jsonl": JSONL, "sub/": ""}),
    Case("clash-tokenize-folder-pair", ("tokenize", "d", "-o", "d/a.prompt.txt",
                                        "--overwrite", "--tokenizer", "words"), "is the input",
         {"d/a.prompt.txt": "a b", "d/a.output.txt": "c"}),
    Case("clash-run-report-is-scenario", run("s.yaml", "--report", "s.yaml", "--overwrite"),
         "--report", {"s.yaml": TRACE_SCENARIO, "t.csv": TRACE}),
    Case("clash-run-report-is-trace", run("s.yaml", "--report", "t.csv", "--overwrite"),
         "is the input", {"s.yaml": TRACE_SCENARIO, "t.csv": TRACE}),
    Case("clash-run-timeline-is-trace", run("s.yaml", "--timeline", "./t.csv", "--overwrite"),
         "--timeline", {"s.yaml": TRACE_SCENARIO, "t.csv": TRACE}),
    Case("clash-run-out-holds-scenario", run("r/s.yaml", "--out", "r", "--overwrite"),
         "holds the input", {"r/s.yaml": scenario()}),
    Case("clash-report-output-is-table", ("report", "r", "-o", "r/summary.csv",
                                          "--overwrite"), "--output",
         {"r/": "", "r/summary.csv": "policy\nnone\n", "r/manifest.json": "{}"}),
    Case("clash-sweep-report-is-sweep", ("sweep", "w.yaml", "--report", "w.yaml",
                                         "--overwrite"), "is the input",
         {"w.yaml": dump_yaml(ANALYTIC)}),
    Case("clash-plan-out-is-plan", ("plan", "p.yaml", "--out", "p.yaml", "--overwrite"),
         "is the input", {"p.yaml": dump_yaml(PLAN)}),
    Case("clash-calibrate-out-is-base", ("calibrate", "--from-measurements", "m",
                                         "--hardware", "base.yaml", "--out", "base.yaml",
                                         "--overwrite"), "is the input",
         {"base.yaml": dump_yaml(PROFILE), "m/": ""}),
    # ---- JSON nested past the decoder's recursion limit: one line naming the file ----
    Case("json-deep-compare-measured", ("compare-measured", "r.json", "--scenario", "s.yaml"),
         "r.json: RESULT: JSON nested too deeply", {"r.json": DEEP_JSON, "s.yaml": scenario()}),
    Case("json-deep-tokenize", ("tokenize", "in.jsonl", "-o", "o.jsonl", "--tokenizer",
                                "words"), "in.jsonl: line 2: JSON nested too deeply",
         {"in.jsonl": JSONL + '{"prompt": ' + DEEP_JSON + ', "output": "x"}\n'}),
    Case("json-deep-mooncake", run("s.yaml"), "t.jsonl: line 1: JSON nested too deeply",
         {"s.yaml": scenario("workload", {"trace": "t.jsonl", "format": "mooncake"}),
          "t.jsonl": '{"timestamp": ' + DEEP_JSON + "}\n"}),
    Case("json-deep-trace-auto", run("s.yaml"), "JSON nested too deeply",
         {"s.yaml": scenario("workload", {"trace": "t.jsonl"}),
          "t.jsonl": '{"prompt_ids": ' + DEEP_JSON + "}\n"}),
    Case("json-deep-manifest-report", ("report", "r", "-o", "x.html"),
         "manifest.json: RESULTS_DIR: JSON nested too deeply",
         {"r/": "", "r/manifest.json": DEEP_JSON}),
    Case("json-deep-manifest-out", run("--out", "r"), "not an empty folder",
         {"r/": "", "r/manifest.json": DEEP_JSON}),
    # ---- a Mooncake hash_ids entry beyond int64 (was an OverflowError) ----
    Case("mooncake-hash-id-2-70", run("s.yaml"), "hash_ids[1] is 1180591620717411303424",
         {"s.yaml": scenario("workload", {"trace": "t.jsonl"}),
          "t.jsonl": '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": '
                     f'[1, {2**70}]}}\n'}),
    # ---- every CSV is counted against its row limit before it is parsed ----
    Case("rows-calibrate-measurements", ("calibrate", "--from-measurements", "m",
                                         "--hardware", "a100-80gb", "--out", "c.yaml"),
         "more than 200,000 rows", {"m/org/model/mlp.csv": KERNEL_CSV_TOO_LONG}),
    Case("rows-validate-measurements", ("validate", "--profile", "a100-80gb",
                                        "--measurements", "m"), "more than 200,000 rows",
         {"m/org/model/attention.csv": KERNEL_CSV_TOO_LONG}),
    Case("rows-trace-csv", run("s.yaml"), "more than 1,000,000 rows",
         {"s.yaml": TRACE_SCENARIO, "t.csv": TRACE_TOO_LONG}),
    # ---- a configuration error before any simulation (the default map: 612 points, 49 s
    #      before the fix; that no point runs first is tests/simulator/planning/
    #      test_gamma_map.py's, deterministically, not a timeout's) ----
    Case("gamma-map-mtp-default-grid", ("gamma-map", "--policy", "mtp"),
         "policy mtp, gamma 1"),
    Case("gamma-map-tp-default-grid", ("gamma-map", "--tensor-parallel", "3"),
         "not divisible by tensor_parallel=3"),
    Case("run-compare-third-entry-bad", run("--compare", "none,chain,mtp"), "--compare mtp"),
    # ---- estimate's default draft comes from the target's family, or is refused ----
    Case("estimate-no-draft-for-target", ("estimate", "--target", "mixtral-8x7b"),
         "the catalog holds no draft for mixtral-8x7b"),
]
