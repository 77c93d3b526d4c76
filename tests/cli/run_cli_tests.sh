#!/usr/bin/env bash
# End-to-end tests of the `stratos` command line: outputs, exit codes and one-line errors.
# Usage: run_cli_tests.sh path/to/stratos   (run from the repository root)
set -u
STRATOS=${1:?usage: run_cli_tests.sh path/to/stratos}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
passed=0
failed=0

# expect NAME EXPECTED_EXIT PATTERN -- command...   (PATTERN is grepped in stdout+stderr)
expect() {
  local name=$1 expected=$2 pattern=$3
  shift 4
  local output
  output=$("$@" 2>&1)
  local code=$?
  if [ "$code" -eq "$expected" ] && grep -qE -- "$pattern" <<<"$output"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: $name (exit $code, expected $expected; pattern '$pattern')"
    echo "  command: $*"
    echo "$output" | tail -n 15 | sed 's/^/  | /'
  fi
}

# Errors are exactly one line on stderr.
expect_one_line_error() {
  local name=$1 pattern=$2
  shift 3
  local stderr_lines
  stderr_lines=$("$@" 2>&1 >/dev/null | wc -l)
  expect "$name" 2 "$pattern" -- "$@"
  if [ "$stderr_lines" -ne 1 ]; then
    failed=$((failed + 1))
    echo "FAILED: $name: error is $stderr_lines lines on stderr, expected 1"
  else
    passed=$((passed + 1))
  fi
}

expect "help lists the subcommands" 0 "search" -- "$STRATOS" --help
expect "help lists the exit codes" 0 "exit codes: 0 success; 1 no result .* 2 bad input .* 4 every searcher declined" -- \
  "$STRATOS" --help
expect "a subcommand's help lists them too" 0 "exit codes: 0 success" -- "$STRATOS" search --help
expect "version prints LibTorch" 0 "LibTorch" -- "$STRATOS" version

expect "search dp+grid on a real model writes summary.json" 0 "gap %" -- \
  bash -c 'set -o pipefail; "$0" search --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 \
  --algo dp,grid --time-limit 60 --no-progress --output-dir "$1" | tee "$1.out"' \
  "$STRATOS" "$WORK/search"
expect "summary.json has the results" 0 '"predicted_iteration_seconds"' -- cat "$WORK/search/summary.json"
expect "the table gives the GPUs each plan uses" 0 "^dp +optimal +[0-9.]+ +8 " -- \
  cat "$WORK/search.out"
# 5 nodes of 8 GPUs, global batch 64: the optimum uses 32 GPUs (DP must divide the batch).
expect "a plan that leaves GPUs idle is flagged under the table" 0 \
  "^dp +optimal +0\.2770 +32 .*a plan on fewer than the 40 GPUs leaves the rest idle" -- \
  bash -c 'set -o pipefail; "$0" search --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 5 --global-batch 64 \
    --algo dp --no-progress --output-dir "$1" | tr "\n" " " | sed "s/  */ /g; s/ dp optimal/\ndp optimal/"' \
  "$STRATOS" "$WORK/idle"
expect "summary.json gives the GPUs the plan uses" 0 '"devices_used": 32' -- cat "$WORK/idle/summary.json"
expect "each plan is written" 0 '"schema": "stratos.plan/2"' -- cat "$WORK/search/plans/dp.json"
expect "each trace is a Chrome trace" 0 '"traceEvents"' -- cat "$WORK/search/traces/dp.trace.json"
expect "a written plan evaluates" 0 "predicted iteration" -- \
  "$STRATOS" evaluate --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 \
  --plan "$WORK/search/plans/dp.json"

expect "search --virtual-stages: the grid finds an interleaved plan" 0 \
  "grid: converged, best 3.28153 s" -- \
  "$STRATOS" search --model gpt3-13b --cluster dgx-a100-80gb-datasheet --nodes 4 --global-batch 128 \
  --algo dp,grid --virtual-stages 1,2,4 --no-progress --output-dir "$WORK/search_interleaved"
expect "an interleaved plan is written with its virtual stages" 0 '"virtual_stages": 4' -- \
  cat "$WORK/search_interleaved/plans/grid.json"
expect "the written interleaved plan evaluates" 0 "interleaved: 2 ranks x 4 virtual stages" -- \
  "$STRATOS" evaluate --model gpt3-13b --cluster dgx-a100-80gb-datasheet --nodes 4 \
  --global-batch 128 --plan "$WORK/search_interleaved/plans/grid.json"
expect "evaluate --virtual-stages prices the grid's interleaved plan (2 ranks x 4 chunks) as the grid" 0 \
  "interleaved: 2 ranks x 4 virtual stages.*predicted iteration: 3\.2815 s" -- \
  bash -c '"$0" evaluate --model gpt3-13b --cluster dgx-a100-80gb-datasheet --nodes 4 \
    --global-batch 128 --tp 2 --pp 2 --dp 8 --micro-batch 1 --virtual-stages 4 | tr "\n" " "' \
  "$STRATOS"
expect_one_line_error "evaluate --virtual-stages needs a pipeline" \
  "command line: --virtual-stages = 2: needs --pp >= 2" -- \
  "$STRATOS" evaluate --model gpt3-13b --nodes 4 --global-batch 128 --tp 2 --pp 1 --dp 16 \
  --micro-batch 1 --virtual-stages 2
expect_one_line_error "evaluate --virtual-stages above a rank's layers names the rank" \
  "command line: --virtual-stages = 12: exceeds the 11 layers of pipeline rank 0" -- \
  "$STRATOS" evaluate --model gpt3-13b --nodes 4 --global-batch 128 --tp 2 --pp 4 --dp 4 \
  --micro-batch 1 --virtual-stages 12
expect_one_line_error "evaluate --virtual-stages refuses GPipe" \
  "command line: --virtual-stages = 2: needs --schedule 1f1b" -- \
  "$STRATOS" evaluate --model gpt3-13b --nodes 4 --global-batch 128 --tp 2 --pp 4 --dp 4 \
  --micro-batch 1 --virtual-stages 2 --schedule gpipe
expect "with interleaving in the space the DP proves the optimum over interleaved plans too (over 1, 2 the plain plan)" 0 \
  "dp: optimal, best 3.29125 s" -- \
  "$STRATOS" search --model gpt3-13b --cluster dgx-a100-80gb-datasheet --nodes 4 --global-batch 128 \
  --algo dp --virtual-stages 1,2 --no-progress --output-dir "$WORK/search_interleaved_dp"
expect "relax searches the virtual stages in its polish, to the DP's optimum over 1, 2, 4 (plain: 3.291 s)" 0 \
  "relax: converged, best 3.28153 s" -- \
  "$STRATOS" search --model gpt3-13b --cluster dgx-a100-80gb-datasheet --nodes 4 --global-batch 128 \
  --algo relax --virtual-stages 1,2,4 --no-progress --output-dir "$WORK/search_interleaved_relax"
expect "the ILP proves the optimum over plain and interleaved pipelines too (plain: 0.966 s)" 0 \
  "ilp: optimal, best 0.92321 s" -- \
  "$STRATOS" search --model gpt3-6.7b --cluster dgx-a100-80gb-datasheet --nodes 2 --global-batch 32 \
  --algo ilp --virtual-stages 1,2 --no-progress --output-dir "$WORK/search_interleaved_ilp"
expect "on a heterogeneous cluster the DP offers its plain optimum interleaved, proving nothing" 0 \
  "dp: converged, best 0.32895 s" -- \
  "$STRATOS" search --model gpt3-1.3b --cluster dgx-h100-a100 --global-batch 64 --algo dp \
  --virtual-stages 1,2 --no-progress --output-dir "$WORK/search_interleaved_hetero"
expect_one_line_error "search --virtual-stages refuses 0" \
  "command line: space.virtual_stages = 0: every entry must be >= 1" -- \
  "$STRATOS" search --virtual-stages 1,0 --algo dp --no-progress --output-dir "$WORK/search_vs0"

expect "evaluate a uniform plan with JSON output" 0 "MFU" -- \
  "$STRATOS" evaluate --model gpt3-6.7b --cluster dgx-a100-80gb --nodes 2 --global-batch 512 \
  --tp 2 --pp 2 --dp 4 --micro-batch 2 --recompute selective --json "$WORK/estimate.json" \
  --trace "$WORK/estimate.trace.json"
expect "estimate JSON has the required keys" 0 '"peak_memory_bytes"' -- cat "$WORK/estimate.json"
expect "estimate JSON has tflops_per_gpu" 0 '"tflops_per_gpu"' -- cat "$WORK/estimate.json"
expect "evaluate reads a HuggingFace config.json" 0 "predicted iteration" -- \
  "$STRATOS" evaluate --model llama3-8b --seq-length 4096 --cluster dgx-h100 --nodes 1 \
  --global-batch 64 --tp 4 --pp 2 --dp 1 --micro-batch 1 --recompute full

# The data directory: `make install` puts the binary and its data under DESTDIR/PREFIX, and the
# installed binary runs from any directory; --data-dir and STRATOS_DATA_DIR choose another one.
REPO=$(pwd)
BUILD=$(cd "$(dirname "$STRATOS")" && pwd)
expect "make install honours PREFIX and DESTDIR" 0 "share/stratos/experiments/plot.py" -- \
  make -s -C "$REPO" install BUILD_DIR="$BUILD" DESTDIR="$WORK/dest" PREFIX=/opt/stratos
INSTALLED=$WORK/dest/opt/stratos/bin/stratos
mkdir -p "$WORK/elsewhere"
expect "the installed stratos reads its data from PREFIX/share/stratos" 0 \
  "data directory: .*/dest/opt/stratos/share/stratos$" -- \
  sh -c 'cd "$1" && "$0" version' "$INSTALLED" "$WORK/elsewhere"
expect "the installed stratos searches from another directory" 0 "gap %" -- \
  sh -c 'cd "$1" && "$0" search --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 --algo grid --no-progress --output-dir out' \
  "$INSTALLED" "$WORK/elsewhere"
expect "the installed specs are there" 0 "" -- test -f "$WORK/dest/opt/stratos/share/stratos/experiments/specs/ladder.toml"
cp -r "$WORK/dest/opt/stratos/share/stratos" "$WORK/mydata"
printf '[model]\nfamily = "gpt"\nhidden_size = 256\nnum_layers = 4\nnum_attention_heads = 4\nvocab_size = 1000\nseq_length = 128\n' \
  >"$WORK/mydata/data/models/tiny-test.toml"
expect "--data-dir adds its zoo" 0 "problem: tiny-test" -- \
  "$STRATOS" --data-dir "$WORK/mydata" search --model tiny-test --nodes 1 --global-batch 8 \
  --algo grid --no-progress --output-dir "$WORK/mydata-search"
expect "STRATOS_DATA_DIR chooses the data directory too" 0 "problem: tiny-test" -- \
  env STRATOS_DATA_DIR="$WORK/mydata" "$STRATOS" search --model tiny-test --nodes 1 \
  --global-batch 8 --algo grid --no-progress --output-dir "$WORK/mydata-search"
expect_one_line_error "--data-dir that is not a data directory" \
  "command line: --data-dir = .*/elsewhere: must be a stratos data directory" -- \
  "$STRATOS" --data-dir "$WORK/elsewhere" search --algo grid --output-dir "$WORK/x"
expect_one_line_error "STRATOS_DATA_DIR that is not a data directory" \
  "STRATOS_DATA_DIR = .*/elsewhere: must be a stratos data directory" -- \
  env STRATOS_DATA_DIR="$WORK/elsewhere" "$STRATOS" search --algo grid --output-dir "$WORK/x"

# Bad input: one line naming file/flag, value and rule; exit code 2.
expect_one_line_error "unknown zoo model" "--model.*not a file and not a zoo model" -- \
  "$STRATOS" search --model gpt5 --algo grid --output-dir "$WORK/x"
expect_one_line_error "unknown algorithm" '--algo = "annealing": must be one of "relax", "dp"' -- \
  "$STRATOS" search --model gpt3-1.3b --algo annealing --output-dir "$WORK/x"
printf '[model]\nfamily = "gpt"\nhidden_size = 1024\nnum_layers = \n' >"$WORK/broken.toml"
expect_one_line_error "malformed TOML names the file and line" "broken.toml:4" -- \
  "$STRATOS" search --model "$WORK/broken.toml" --algo grid --output-dir "$WORK/x"
printf '{"schema": "stratos.plan/1", "global_batch_size": 512,' >"$WORK/broken.json"
expect_one_line_error "malformed plan JSON names the file" "broken.json: JSON parse error" -- \
  "$STRATOS" evaluate --model gpt3-6.7b --nodes 2 --plan "$WORK/broken.json"
printf '{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 32, "vocab_size": 1e400}' \
  >"$WORK/overflow.config.json"
expect_one_line_error "a number overflowing a double in a JSON model names file, key, value, rule" \
  "overflow.config.json: vocab_size = 1e400: must be a finite number" -- \
  "$STRATOS" search --model "$WORK/overflow.config.json" --algo grid --output-dir "$WORK/x"
sed 's/"num_microbatches": [0-9]*/"num_microbatches": 4294967296/' "$WORK/search/plans/dp.json" >"$WORK/big.json"
expect_one_line_error "an integer too large for its field in a plan names file, key, value, rule" \
  "big.json: num_microbatches = 4294967296: must be an integer in \[-2147483648, 2147483647\]" -- \
  "$STRATOS" evaluate --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 \
  --plan "$WORK/big.json"
printf '[model]\nfamily = "explicit"\n[[model.layer]]\nforward_flops = inf\nparam_bytes = 2\nactivation_bytes = 1\n' \
  >"$WORK/inf.toml"
expect_one_line_error "inf in a TOML model names file, key, value, rule" \
  "inf.toml: model.layer\[0\].forward_flops = inf: must be a finite number" -- \
  "$STRATOS" search --model "$WORK/inf.toml" --algo grid --output-dir "$WORK/x"
expect_one_line_error "a plan that does not fit the problem names the key" \
  "--micro-batch = 1: micro-batch x dp = 3 must divide the global batch 512" -- \
  "$STRATOS" evaluate --model gpt3-6.7b --nodes 2 --global-batch 512 --tp 1 --pp 1 --dp 3 --micro-batch 1
# Tensor parallelism across nodes (Narayanan et al. SC'21 Figure 13 measures TP 16 and 32 on
# nodes of 8): a TP group larger than a node takes whole nodes and its all-reduces cross the NICs.
expect "evaluate prices a TP group spanning two nodes" 0 \
  "s0: mesh 2x8 dp1 tp16 zero0 recompute=full" -- \
  "$STRATOS" evaluate --model gpt3-175b --nodes 8 --global-batch 64 --tp 16 --pp 4 --dp 1 \
  --micro-batch 1 --recompute full
"$STRATOS" evaluate --model gpt3-175b --nodes 8 --global-batch 64 --tp 16 --pp 4 --dp 1 \
  --micro-batch 1 --json "$WORK/tp16.json" >/dev/null
python3 -c 'import json, sys; json.dump(json.load(open(sys.argv[1]))["plan"], open(sys.argv[2], "w"))' \
  "$WORK/tp16.json" "$WORK/tp16_plan.json"
expect "export --to megatron writes a TP group spanning nodes" 0 "predicted iteration: 18\.0150 s" -- \
  "$STRATOS" export --model gpt3-175b --nodes 8 --plan "$WORK/tp16_plan.json" --to megatron \
  --output "$WORK/export_tp16"
expect "its launch script sets TP 16" 0 "--tensor-model-parallel-size 16" -- \
  cat "$WORK/export_tp16/megatron_args.sh"
expect "import reads it back at the same estimate" 0 "your configuration: 18\.0150 s/iteration" -- \
  "$STRATOS" import --from megatron "$WORK/export_tp16/megatron_args.sh" --model gpt3-175b --nodes 8
expect "search --max-tp 16 searches TP groups of whole nodes too: the DP's optimum stays TP 8" 0 \
  "^dp +optimal +14\.5343 " -- \
  "$STRATOS" search --model gpt3-175b --nodes 8 --global-batch 64 --algo dp --max-tp 16 \
  --output-dir "$WORK/max_tp"
# ZeRO-3 at scale: DeepSpeed all-gathers each parameter tensor (a GPT block's 12 collectives per
# pass, each with the ring's steps over the DP group); FSDP a layer at a time, prefetched.
ZERO3=(evaluate --model gpt3-175b --nodes 192 --global-batch 1536 --tp 1 --pp 1 --dp 1536
       --micro-batch 1 --zero 3 --recompute full)
expect "ZeRO-3 on 1536 GPUs gathers a tensor at a time by default" 0 \
  "predicted iteration: 58\.5426 s" -- "$STRATOS" "${ZERO3[@]}"
expect "--zero3-gather layer gathers a layer at a time" 0 "predicted iteration: 31\.1510 s" -- \
  "$STRATOS" "${ZERO3[@]}" --zero3-gather layer
expect "--zero3-gather layer-prefetch hides each layer's gather under compute" 0 \
  "predicted iteration: 19\.3432 s" -- "$STRATOS" "${ZERO3[@]}" --zero3-gather layer-prefetch
expect_one_line_error "--zero3-gather names the flag and its values" \
  '--zero3-gather = "block": must be one of "tensor", "layer", "layer-prefetch"' -- \
  "$STRATOS" "${ZERO3[@]}" --zero3-gather block
expect_one_line_error "search --max-tp 0 names the flag and the rule" "--max-tp = 0: must be >= 1" -- \
  "$STRATOS" search --max-tp 0 --algo dp --output-dir "$WORK/max_tp0"
expect_one_line_error "a TP group neither inside a node nor of whole nodes names the rule" \
  "tensor_parallel 12 must divide the mesh's 8 GPUs per node or be a multiple of them" -- \
  "$STRATOS" evaluate --model gpt3-175b --nodes 3 --global-batch 64 --tp 12 --pp 1 --dp 2 \
  --micro-batch 1
# Heterogeneous clusters: each stage is priced on its own group (the one-line refusal before
# that is gone); the groups, their counts and a stage's group come from flags checked with
# one-line errors; dp searches them, the searchers that do not yet decline.
expect "evaluate prices AMP's cluster per group" 0 \
  "g4dn.12xlarge +T4-16GB +4/4 " -- \
  "$STRATOS" evaluate --model gpt2 --cluster amp-het-cluster --global-batch 32 \
  --tp 1 --pp 4 --dp 4 --micro-batch 2 --stage-groups g4dn.12xlarge,p3.8xlarge,p3.8xlarge,p3.8xlarge
expect "--nodes per group" 0 "h100 \(2 x 8 H100-SXM5-80GB\), a100 \(3 x 8 A100-SXM4-80GB\)" -- \
  "$STRATOS" evaluate --model gpt3-6.7b --cluster dgx-h100-a100 --nodes h100=2,a100=3 \
  --global-batch 512 --tp 8 --pp 4 --dp 1 --micro-batch 1
expect_one_line_error "--nodes naming no group lists the groups" \
  '--nodes = "v100=2": names no node group "v100" \(groups: "h100", "a100"\)' -- \
  "$STRATOS" evaluate --model gpt3-6.7b --cluster dgx-h100-a100 --nodes v100=2 \
  --global-batch 512 --tp 8 --pp 2 --dp 1 --micro-batch 1
expect_one_line_error "--stage-groups naming no group lists the groups" \
  '--stage-groups = "h100,b200": names no node group "b200"' -- \
  "$STRATOS" evaluate --model gpt3-6.7b --cluster dgx-h100-a100 --global-batch 512 \
  --tp 8 --pp 2 --dp 1 --micro-batch 1 --stage-groups h100,b200
expect_one_line_error "stages that overfill a group name it" \
  "stages = 16 devices in node group h100: the group has only 8 devices" -- \
  "$STRATOS" evaluate --model gpt3-6.7b --cluster dgx-h100-a100 --global-batch 512 \
  --tp 8 --pp 2 --dp 1 --micro-batch 1 --stage-groups h100,h100
expect "relax searches a heterogeneous cluster and reaches the DP optimum" 0 \
  "relax +converged +0\.6386 .* 0\.00" -- \
  "$STRATOS" search --model gpt3-1.3b --cluster dgx-h100-a100 --nodes h100=2,a100=2 --global-batch 256 \
  --algo dp,relax,local --output-dir "$WORK/hetero"
expect "dp searches it exactly, per-group budgets and group order included" 0 \
  "optimal over 9 microbatch counts and 4 orders of the node groups" -- cat "$WORK/hetero/summary.json"
expect "local searches it too" 0 '"algorithm": "local"' -- cat "$WORK/hetero/summary.json"
expect "the summary lists the node groups" 0 '"name": "a100"' -- cat "$WORK/hetero/summary.json"
expect "relax reaches the DP optimum: its polish deepens the relaxation's 3 stages to 10 (relax.polish=none: 36.24 s)" \
  0 "relax: converged, best 32.2407 s" -- \
  "$STRATOS" search --model gpt3-175b --cluster dgx-h100-a100-datasheet --nodes h100=16,a100=16 \
  --global-batch 1536 --algo relax --no-progress --output-dir "$WORK/hetero-175b"
expect "space.node_groups keeps the stages on the groups it names" 0 \
  "dp: optimal, best 0.835853 s" -- \
  "$STRATOS" search --model gpt3-1.3b --cluster dgx-h100-a100 --nodes h100=2,a100=2 --global-batch 256 \
  --algo dp --option space.node_groups=h100 --output-dir "$WORK/hetero-h100"
expect_one_line_error "space.node_groups naming no group lists the groups" \
  'space.node_groups = b200: names no node group of cluster dgx-h100-a100 \(groups: "h100", "a100"\)' -- \
  "$STRATOS" search --model gpt3-1.3b --cluster dgx-h100-a100 --global-batch 256 \
  --algo dp --option space.node_groups=b200 --output-dir "$WORK/x"
# Hardening: an empty or root output directory is refused (it wrote summary.json, plans/ and
# traces/ into /); a batch of 2^31 - 1 searches in well under a second (it died with SIGFPE in
# the microbatch-count loop) and skips the trace of 2^31 - 1 microbatches instead of simulating it.
expect_one_line_error "--output-dir \"\" is refused" '--output-dir = "": must name a directory' -- \
  "$STRATOS" search --model gpt3-1.3b --algo grid --output-dir ""
expect_one_line_error "--output-dir / is refused" \
  "--output-dir = /: must be a directory other than the filesystem root" -- \
  "$STRATOS" search --model gpt3-1.3b --algo grid --output-dir /
expect "a global batch of 2^31 - 1 is searched, its huge trace skipped" 0 \
  "traces/dp.trace.json not written: [0-9]+ events \\(more than 2000000\\)" -- \
  timeout 60 "$STRATOS" search --model gpt3-1.3b --global-batch 2147483647 --algo dp \
  --output-dir "$WORK/bigbatch"
expect_one_line_error "--pp above the block count names --pp" \
  "command line: --pp = 25: must be at most the model's 24 transformer blocks" -- \
  "$STRATOS" evaluate --model gpt3-1.3b --pp 25 --tp 1 --dp 1 --micro-batch 1
expect "--pp places blocks as Megatron-LM: embedding + 6 blocks first, 6 blocks + head last" 0 \
  '4 stages \[7\|6\|6\|7 layers\]' -- \
  "$STRATOS" evaluate --model gpt3-1.3b --cluster dgx-a100-80gb --pp 4 --tp 1 --dp 2 \
  --micro-batch 1 --global-batch 64
expect_one_line_error "--nodes whose device count overflows names --nodes" \
  "--nodes = 2000000000: must give at most 1048576 devices \(8 GPUs per node" -- \
  "$STRATOS" search --model gpt3-1.3b --algo grid --nodes 2000000000 --output-dir "$WORK/x"
printf '[model]\nfamily = "explicit"\n[[model.layer]]\nforward_flops = 9007199254740993\nparam_bytes = 2e6\nactivation_bytes = 1e6\n' \
  >"$WORK/int53.toml"
expect "an integer above 2^53 in a number key is read as a number (was: bad optional access, exit 3)" 0 \
  "gap %" -- "$STRATOS" search --model "$WORK/int53.toml" --algo grid --output-dir "$WORK/int53"
expect_one_line_error "negative batch" "--global-batch = -4: must be >= 1" -- \
  "$STRATOS" search --model gpt3-1.3b --global-batch -4 --algo grid --output-dir "$WORK/x"

# Command-line parse errors are input errors like any other: exit 2, one line.
expect_one_line_error "an unknown flag" "command line: The following argument was not expected: --frobnicate" -- \
  "$STRATOS" search --frobnicate
expect_one_line_error "no subcommand" "command line: A subcommand is required" -- "$STRATOS"
expect_one_line_error "a value of the wrong type names flag, value and rule" \
  "command line: --nodes = \"two\": must be an integer" -- "$STRATOS" search --nodes two
expect_one_line_error "a flag without its value" "command line: --seed" -- "$STRATOS" search --seed
expect_one_line_error "compare --algos is gone (one spelling: --algo)" "not expected: .*--algos" -- \
  "$STRATOS" compare --algos dp
# Values that mean nothing are refused like any other bad value, naming flag, value and rule.
for bad in "search --max-stages 0:--max-stages = 0: must be >= 1" \
           "search --nodes 0:--nodes = 0: must be >= 1" \
           "search --global-batch 0:--global-batch = 0: must be >= 1" \
           "search --time-limit -5:--time-limit = -5: must be > 0" \
           "search --time-limit nan:--time-limit = nan: must be a finite number" \
           "search --seq-length 0:--seq-length = 0: must be >= 1" \
           "compare --max-stages 0:--max-stages = 0: must be >= 1" \
           "evaluate --zero 4 --tp 1:--zero = 4: must be in \[0, 3\]" \
           "bench ladder --time-limit 0:--time-limit = 0: must be > 0" \
           "run --zero 4:--zero = 4: must be in \[0, 3\]" \
           "cosearch --nodes 0:--nodes = 0: must be >= 1" \
           "experiment run x.toml --jobs 0:--jobs = 0: must be >= 1" \
           "experiment run x.toml --max-cells -1:--max-cells = -1: must be >= 0"; do
  # shellcheck disable=SC2086
  expect_one_line_error "refused: ${bad%%:*}" "command line: ${bad#*:}" -- "$STRATOS" ${bad%%:*}
done
# --algo: a comma list or repeated, `all` for every searcher; compare takes the same flags.
expect "--algo repeated runs each named searcher" 0 "^grid .*converged" -- \
  "$STRATOS" search --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 \
  --algo dp --algo grid --no-progress --output-dir "$WORK/repeated"
expect "--algo repeated: both plans are written" 0 "" -- \
  test -f "$WORK/repeated/plans/dp.json" -a -f "$WORK/repeated/plans/grid.json"
expect "compare takes --algo as search does" 0 "^dp .*optimal" -- \
  "$STRATOS" compare --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 \
  --algo dp,grid --time-limit 30 --no-progress --output-dir "$WORK/compare"
expect "compare writes the anytime curves" 0 "^dp," -- cat "$WORK/compare/anytime.csv"

# Gradient compression: priced by evaluate, refused with the allowed names.
expect "evaluate prices PowerSGD gradient compression" 0 "compression=powersgd\(rank=2\)" -- \
  "$STRATOS" evaluate --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 2 --global-batch 64 \
  --tp 1 --pp 1 --dp 16 --micro-batch 1 --zero 1 --grad-compression powersgd --powersgd-rank 2 \
  --json "$WORK/powersgd.json"
expect_one_line_error "an unknown compression lists the allowed names" \
  "--grad-compression = \"zip\": must be one of \"none\", \"bf16\"" -- \
  "$STRATOS" evaluate --model gpt3-1.3b --nodes 1 --global-batch 64 --tp 1 --pp 1 --dp 8 \
  --micro-batch 1 --grad-compression zip
expect_one_line_error "compression with ZeRO-3 is refused" "needs the full gradient on every DP rank" -- \
  "$STRATOS" evaluate --model gpt3-1.3b --nodes 1 --global-batch 64 --tp 1 --pp 1 --dp 8 \
  --micro-batch 1 --zero 3 --grad-compression sign
expect_one_line_error "run refuses a bad top-k density before launching" "--topk-density = 2: must be in" -- \
  "$STRATOS" run --dp 2 --micro-batch 2 --global-batch 4 --grad-compression topk --topk-density 2 \
  --output-dir "$WORK/run_bad"

# Memory: which stage runs out and by how much; exit code 1.
expect "a plan that runs out of memory says which stage and by how much" 1 \
  "does not fit: stage 0 needs .* GiB over" -- \
  "$STRATOS" evaluate --model gpt3-175b --cluster dgx-a100-80gb --nodes 1 --global-batch 8 \
  --tp 8 --pp 1 --dp 1 --micro-batch 1
expect "a model that fits nowhere: no feasible plan, with reasons" 1 "no feasible plan" -- \
  "$STRATOS" search --model gpt3-175b --cluster p3.16xlarge --nodes 1 --global-batch 8 \
  --algo all --no-progress --output-dir "$WORK/nowhere"
# ... with a reason from every searcher (memory, or the exhaustive search's size refusal).
"$STRATOS" search --model gpt3-175b --cluster p3.16xlarge --nodes 1 --global-batch 8 --algo all \
  --no-progress --output-dir "$WORK/nowhere" >/dev/null 2>"$WORK/nowhere.err"
for algorithm in relax dp ilp mcmc grid exhaustive; do
  expect "no feasible plan: $algorithm gives its reason" 0 "^  $algorithm: .*(memory|too large)" -- \
    cat "$WORK/nowhere.err"
done

# A searcher that does not take a problem declines it (not "infeasible"); when every searcher
# asked declined, the exit code is 4.
expect "exhaustive over its plan limit reports declined" 4 "^exhaustive +declined " -- \
  "$STRATOS" search --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 \
  --algo exhaustive --option search.max_evaluations=10 --no-progress --output-dir "$WORK/declined"
expect "every searcher declined: exit 4 saying so" 4 "every searcher declined the problem" -- \
  "$STRATOS" search --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 \
  --algo exhaustive --option search.max_evaluations=10 --no-progress --output-dir "$WORK/declined"
expect "every searcher declined: the reason is printed" 4 "^  exhaustive: declined: problem too large" -- \
  "$STRATOS" search --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 \
  --algo exhaustive --option search.max_evaluations=10 --no-progress --output-dir "$WORK/declined"
expect "summary.json records the declined status" 0 '"status": "declined"' -- cat "$WORK/declined/summary.json"
expect "a declined searcher beside one that finds a plan: exit 0" 0 "gap %" -- \
  "$STRATOS" search --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 \
  --algo exhaustive,grid --option search.max_evaluations=10 --no-progress --output-dir "$WORK/declined2"

# Validation reports against published measurements: each runs, prints its headline and writes
# its JSON and CSV.
validate_pattern() {
  case $1 in
    megatron-h100) echo "MAPE .* held-out rows" ;;
    amp) echo "Spearman .* Kendall tau-b.*the shipped file is .calibrate --amp-profile.'s fit" ;;
    korthikanti) echo "recompute overhead full" ;;
    zero) echo "agree up to the printed rounding" ;;
    alpa-point) echo "predicted .* s vs measured 2.465 s" ;;
    vtrain-shapes) echo "the largest per-GPU GEMMs \\(h 2048, TP 1, micro batch 8\\) reach [0-9.]*% of peak" ;;
    nccl) echo "held-out MAPE from 1 MiB: .*4 nodes x 8 B200 [^;]*: model [0-9.]*%" ;;
  esac
}
for report in megatron-h100 amp korthikanti zero alpa-point vtrain-shapes nccl; do
  expect "validate $report prints its headline" 0 "$(validate_pattern "$report")" -- \
    "$STRATOS" validate "$report" --output-dir "$WORK/validate/$report"
  expect "validate $report writes its JSON" 0 "\"headline\"" -- \
    cat "$WORK/validate/$report/$report.json"
  expect "validate $report writes its CSV" 0 "," -- cat "$WORK/validate/$report/$report.csv"
done
expect "validate lists its reports" 0 "alpa-point" -- "$STRATOS" validate --help
expect "validate targets checks every target, GPT-3 6.7B's MFU on 16 A100s among them" 0 \
  "^ *mfu  *predicted MFU % of GPT-3 6.7B on 16 A100s  *[0-9.]*  *in \[45, 60\]  *yes" -- \
  "$STRATOS" validate targets --output-dir "$WORK/validate/targets"
expect "validate targets writes how many it met" 0 '"total": 9' -- \
  cat "$WORK/validate/targets/targets.json"
# Since AMP's T4 cluster takes AMP's 50 Gb/s inside a node (2026-12-07) every target is met: a
# regression in any report shows here.
expect "validate targets meets 9 of 9" 0 \
  '"headline": "9 of 9 targets met"' -- \
  cat "$WORK/validate/targets/targets.json"
# Priced as Megatron-LM trains (fp32 gradients) the DP fits microbatch 2 (m = 16); with bf16
# gradients it fits microbatch 4 (m = 8).
expect "validate targets prices the MFU plan as Megatron-LM trains" 0 \
  '"mfu_plan": "1 stage \[34 layers\] m=16 ' -- cat "$WORK/validate/targets/targets.json"
expect "calibrate --amp-profile fits the T4 on AMP's layer profile" 0 \
  "matmul_efficiency 0.5100; block curve scale 2.904; intra-node latency 279.2 us" -- \
  "$STRATOS" calibrate --amp-profile --cluster g4dn.12xlarge-datasheet --name g4dn.12xlarge \
  --framework-memory-runs experiments/gpu/results/h200-2026-11-27/runs --output "$WORK/t4-amp.toml"
expect "the shipped g4dn.12xlarge is what calibrate --amp-profile writes" 0 "" -- \
  diff data/clusters/g4dn.12xlarge.toml "$WORK/t4-amp.toml"

# A failed run leaves earlier outputs intact.
cp "$WORK/search/summary.json" "$WORK/summary.before"
"$STRATOS" search --model gpt3-1.3b --nodes 1 --global-batch 64 --algo nope \
  --output-dir "$WORK/search" >/dev/null 2>&1
expect "a failed run leaves summary.json intact" 0 "" -- cmp "$WORK/summary.before" "$WORK/search/summary.json"

# Sizes that cannot be held are refused where they are read (issue 18, defect 2): a layer
# repeated 10^9 times used to take 15 GB in evaluate.
printf '[model]\nfamily = "explicit"\n[[model.layer]]\nforward_flops = 1e9\nparam_bytes = 2e6\nactivation_bytes = 1e6\ncount = 1000000000\n' >"$WORK/huge_count.toml"
expect_one_line_error "a layer count above the model limit is refused at the key" \
  "huge_count.toml: model.layer\[0\].count = 1000000000: must be <= 1048576" -- \
  "$STRATOS" evaluate --model "$WORK/huge_count.toml" --tp 1 --pp 1 --dp 8 --micro-batch 1 --global-batch 8
printf '[model]\nfamily = "gpt"\nhidden_size = 64\nnum_layers = 2000000000\nnum_attention_heads = 4\nvocab_size = 100\nseq_length = 16\n' >"$WORK/huge_layers.toml"
expect_one_line_error "a transformer with more blocks than the model limit is refused" \
  "model.num_layers = 2000000000: must be at most 1048574" -- \
  "$STRATOS" evaluate --model "$WORK/huge_layers.toml" --tp 1 --pp 1 --dp 8 --micro-batch 1 --global-batch 8

# Searches are bounded in time and memory (issue 18, defect 2): the DP on 16,384 layers with a
# 2 s limit ran 97 s in 6.5 GB, the ILP 539 s in 12.8 GB; now they decline what their tables
# cannot hold in the budget, and stop within their time limit.
printf '[model]\nfamily = "gpt"\nhidden_size = 1024\nnum_layers = NUM\nnum_attention_heads = 16\nvocab_size = 50000\nseq_length = 1024\n' >"$WORK/long.toml.in"
sed 's/NUM/16384/' "$WORK/long.toml.in" >"$WORK/long16k.toml"
sed 's/NUM/4096/' "$WORK/long.toml.in" >"$WORK/long4k.toml"
LONG=(--global-batch 512 --nodes 4 --no-progress --output-dir "$WORK/long")
expect "the DP declines tables it cannot fill within the time limit" 4 \
  "problem too large for the DP within the time limit: its tables for 16386 layers" -- \
  "$STRATOS" search --model "$WORK/long16k.toml" --algo dp --time-limit 2 "${LONG[@]}"
expect "the DP declines tables over --memory-limit" 4 \
  "problem too large for the DP: .* over the memory limit of 0\.1 GiB" -- \
  "$STRATOS" search --model "$WORK/long4k.toml" --algo dp --memory-limit 0.1 "${LONG[@]}"
expect "the ILP declines columns over --memory-limit" 4 \
  "problem too large for the ILP: .* over the memory limit of 0\.0 GiB" -- \
  "$STRATOS" search --model "$WORK/long4k.toml" --algo ilp --memory-limit 0.01 "${LONG[@]}"
expect "the DP stops at its time limit inside its table builds" 0 "within" -- sh -c \
  '"$0" search --model "$1" --algo dp --time-limit 2 --global-batch 512 --nodes 4 --no-progress --output-dir "$2" >/dev/null; python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[\"results\"][0]; print(r[\"status\"], \"within\" if r[\"search_wall_seconds\"] < 8 else r[\"search_wall_seconds\"])" "$2/summary.json"' \
  "$STRATOS" "$WORK/long4k.toml" "$WORK/long"

# A run's outputs are one set (issue 18, defect 6): a search that finds no plan, into the
# directory of one that did, leaves no plan or trace of the earlier problem beside its summary,
# and no staging directory.
cp -r "$WORK/search" "$WORK/mixed"
"$STRATOS" search --model gpt3-175b --cluster p3.16xlarge --nodes 1 --global-batch 8 --algo dp \
  --no-progress --output-dir "$WORK/mixed" >/dev/null 2>&1
expect "a run without a plan replaces the summary" 0 '"model": "gpt3-175b"' -- cat "$WORK/mixed/summary.json"
expect "... and removes the earlier run's plans and traces" 0 "^0$" -- \
  sh -c 'ls "$0/plans" "$0/traces" | grep -c json; true' "$WORK/mixed"
expect "... and leaves no staging directory" 0 "^0$" -- \
  sh -c 'ls -a "$0" | grep -c staging; true' "$WORK/mixed"

# Profile: a small grid writes the three tables of the profile database.
expect "profile --quick writes the profile database" 0 "wrote the profile database" -- \
  "$STRATOS" profile --quick --nproc 2 --repeats 3 --output-dir "$WORK/profile"
expect "profile: GEMM rows with units in the header" 0 "^m,n,k,dtype,flops,seconds$" -- \
  head -1 "$WORK/profile/matmul.csv"
expect "profile: block rows" 0 "^64,2,64,1,1,f32," -- cat "$WORK/profile/layer.csv"
expect "profile: all-reduce rows of the 2-process group" 0 "^all_reduce,f32,1,2,2,1,0,1024," -- \
  cat "$WORK/profile/collective.csv"
# The format must be read; the fit itself may refuse a profile that scheduling noise on a loaded
# 2-core machine made flat (its own one-line error), which is not a format failure.
expect "calibrate --vtrain-csv fits the A100 on vTrain's runs as the zoo ships it" 0 \
  "GEMM curve 0.8692 / \\(1 \\+ 755.9 / min\\(m, n, k\\)\\); block floors 1067 us forward / 1077 us backward" -- \
  "$STRATOS" calibrate --vtrain-csv ../shared/data/reference/vtrain_a100_single_node.csv \
  --cluster dgx-a100-80gb-datasheet --name dgx-a100-80gb \
  --framework-memory-runs experiments/gpu/results/h200-2026-11-27/runs --output "$WORK/a100-vtrain.toml"
expect "the shipped dgx-a100-80gb is what calibrate --vtrain-csv writes" 0 "" -- \
  diff data/clusters/dgx-a100-80gb.toml "$WORK/a100-vtrain.toml"
expect "calibrate --megatron-h100-csv fits the H100 on Megatron-Core's runs as the zoo ships it" 0 \
  "matmul_efficiency 0.4910 \\(datasheet 0.8030\\)" -- \
  "$STRATOS" calibrate --megatron-h100-csv ../shared/data/reference/megatron_h100_weak_scaling_2024.csv \
  --cluster dgx-h100-datasheet --name dgx-h100 \
  --framework-memory-runs experiments/gpu/results/h200-2026-11-27/runs --output "$WORK/h100-megatron.toml"
expect "the shipped dgx-h100 is what calibrate --megatron-h100-csv writes" 0 "" -- \
  diff data/clusters/dgx-h100.toml "$WORK/h100-megatron.toml"
expect_one_line_error "calibrate --megatron-h100-csv calibrates one device" \
  "--megatron-h100-csv calibrates one device: the cluster must have one node group" -- \
  "$STRATOS" calibrate --megatron-h100-csv ../shared/data/reference/megatron_h100_weak_scaling_2024.csv \
  --cluster dgx-h100-a100 --output "$WORK/bad.toml"
expect "the vTrain-calibrated A100 is a cluster file every command reads" 0 "MFU" -- \
  "$STRATOS" evaluate --model gpt3-1.3b --cluster "$WORK/a100-vtrain.toml" --global-batch 64 --tp 1 --pp 1 --dp 8 --micro-batch 1
expect_one_line_error "calibrate --vtrain-csv calibrates one device" \
  "--vtrain-csv calibrates one device: the cluster must have one node group" -- \
  "$STRATOS" calibrate --vtrain-csv ../shared/data/reference/vtrain_a100_single_node.csv \
  --cluster dgx-h100-a100 --output "$WORK/bad.toml"
expect "calibrate reads the profile stratos profile wrote" 0 \
  "wrote .*local.toml|fit of [a-z_]+: the intra-node bandwidth comes out unbounded" -- \
  sh -c '"$0" calibrate --profile "$1" --cluster p3.16xlarge --output "$2"; true' \
  "$STRATOS" "$WORK/profile" "$WORK/local.toml"
# The search-to-run loop on this machine: a calibrated description of the local workers saved in
# the user's zoo (tolerating the fit's refusal on a loaded machine, as above), found by name, and
# search --run training the best plan the runtime runs. The run itself uses a fixed description
# in the user zoo, so that it does not depend on the fit.
export STRATOS_USER_ZOO="$WORK/user_zoo"
expect "calibrate --cluster local --save-as saves this machine's workers in the user zoo" 0 \
  "every command now takes it as --cluster local|fit of [a-z_]+: the intra-node bandwidth comes out unbounded" -- \
  sh -c '"$0" calibrate --profile "$1" --cluster local --save-as local; true' "$STRATOS" "$WORK/profile"
if [ -f "$WORK/user_zoo/clusters/local.toml" ]; then
  expect "the saved description is a zoo cluster by name" 0 "on 1 x local \(2 devices\)" -- \
    "$STRATOS" search --model gpt-tiny --cluster local --global-batch 8 --algo dp --no-progress \
    --output-dir "$WORK/local_search"
fi
mkdir -p "$WORK/user_zoo/clusters"
cat > "$WORK/user_zoo/clusters/two-workers.toml" <<'TOML'
[cluster]
name = "two-workers"
[[device]]
name = "cpu-worker"
peak_TFLOPS = 0.01
memory_GB = 4
hbm_GBps = 10
matmul_efficiency = 1.0
[[node_group]]
count = 1
gpus_per_node = 2
device = "cpu-worker"
[[network]]
name = "loopback"
bandwidth_GBps = 1
latency_us = 30
TOML
expect "search --run trains the best plan and prints measured against predicted" 0 \
  "--run: loss [0-9.]+ -> [0-9.]+; iteration [0-9.]+ s measured, [0-9.]+ s predicted by the search" -- \
  "$STRATOS" search --model gpt-tiny --cluster two-workers --global-batch 4 --algo dp,grid \
  --run --run-steps 3 --no-progress --output-dir "$WORK/search_run"
expect "search --run wrote the run's measurement" 0 '"iteration_seconds"' -- \
  cat "$WORK/search_run/run/measurement.json"
unset STRATOS_USER_ZOO
# The GPU path's commands where there is no GPU: refused by name, and the measured H200 runs
# re-derived on the calibrated zoo description (run-report).
if ! "$STRATOS" version | grep -q "CUDA: yes"; then
  expect_one_line_error "run --device cuda without a GPU" 'command line: --device = cuda: this LibTorch .* sees no CUDA device' -- \
    "$STRATOS" run --device cuda --steps 1 --output-dir "$WORK/cuda_run"
fi
if ! "$STRATOS" version | grep -q "Kineto: yes"; then
  expect_one_line_error "run --kineto-step without Kineto" 'command line: --kineto-step = 1: this build has no Kineto profiler' -- \
    "$STRATOS" run --kineto-step 1 --steps 2 --output-dir "$WORK/kineto_run"
fi
expect_one_line_error "run --pp above the block count names --pp" \
  "command line: --pp = 9: must be at most the model's 4 transformer blocks" -- \
  "$STRATOS" run --pp 9 --steps 1 --output-dir "$WORK/pp9_run"
expect_one_line_error "run --dtype bf16 on the CPU" 'command line: --dtype = bf16: needs --device cuda' -- \
  "$STRATOS" run --dtype bf16 --steps 1 --output-dir "$WORK/bf16_run"
expect_one_line_error "run --virtual-stages beyond the blocks" \
  "command line: --virtual-stages = 3: --pp x --virtual-stages = 6 must be at most the model's 4 transformer blocks" -- \
  "$STRATOS" run --pp 2 --virtual-stages 3 --steps 1 --output-dir "$WORK/vs_run"
expect_one_line_error "run --virtual-stages with microbatches not a multiple of the ranks" \
  "num_microbatches = 3: must be a multiple of the 2 pipeline ranks for the interleaved 1F1B schedule" -- \
  "$STRATOS" run --pp 2 --virtual-stages 2 --global-batch 3 --micro-batch 1 --steps 1 --output-dir "$WORK/vs_run"
expect_one_line_error "run --virtual-stages with GPipe" \
  'schedule = gpipe: virtual stages run the interleaved 1F1B schedule: must be "1f1b"' -- \
  "$STRATOS" run --pp 2 --virtual-stages 2 --schedule gpipe --steps 1 --output-dir "$WORK/vs_run"
expect_one_line_error "run --fp32-residual-connection in f32" 'command line: --fp32-residual-connection = set: applies to --dtype bf16 only' -- \
  "$STRATOS" run --fp32-residual-connection --steps 1 --output-dir "$WORK/fp32_residual_run"
R=experiments/gpu/results/h200-2026-11-26b
expect "run-report re-predicts measured GPU runs" 0 "run2_p_mb4_full_s2048.json +0.7224 +0.78[0-9]+ +\+8.8%" -- \
  "$STRATOS" run-report $R/runs/run2_p_mb4_full_s2048.json $R/runs/run2_p_mb2_none_s2048.json \
  --cluster h200-node --output-dir "$WORK/run_report"
expect "run-report writes its summary with the MAPE" 0 '"mape": 0.100' -- \
  cat "$WORK/run_report/summary.json"
expect "run-report writes each run's reports" 0 '"predicted_iteration_seconds"' -- \
  cat "$WORK/run_report/0/predicted_vs_measured.json"
expect "run-report re-derives a run traced with Kineto on a build without it" 0 "run2_kineto_mb8.json" -- \
  "$STRATOS" run-report $R/runs/run2_kineto_mb8.json --output-dir "$WORK/run_report_kineto"
expect_one_line_error "run-report refuses a file that is no measurement" \
  "not a stratos.measurement/1 file" -- \
  "$STRATOS" run-report $R/profile/profile.json --output-dir "$WORK/run_report_bad"
expect "calibrate --matmul-dtype bf16 fits a GPU profile's GEMMs" 0 \
  "max_efficiency 0.820, half_efficiency_dim 0, overhead 30.1 us" -- \
  "$STRATOS" calibrate --profile $R/profile --cluster h200-node-datasheet --matmul-dtype bf16 \
  --output "$WORK/h200.toml"
expect "calibrate fits the block curve on the GPU profile's blocks" 0 \
  "forward: scale 1.322, floor 493 us; backward: scale 1.432, floor 1162 us" -- \
  "$STRATOS" calibrate --profile $R/profile --cluster h200-node-datasheet --matmul-dtype bf16 \
  --output "$WORK/h200_again.toml"
M=experiments/gpu/results/h200-2026-11-27
expect "run-report compares measured and predicted peak memory of GPU runs" 0 \
  "MAPE of the predicted peak memory \(tensors\) over 10 run\(s\): 3.4%" -- \
  "$STRATOS" run-report $M/runs/*.json --cluster h200-node --output-dir "$WORK/run_report_memory"
expect "run-report's memory medians: outside the allocator and its overhead" 0 \
  '"median_fragmentation": 0.079' -- cat "$WORK/run_report_memory/summary.json"
expect "calibrate --memory-runs writes the shipped h200-node" 0 "" -- \
  "$STRATOS" calibrate --profile $R/profile --cluster h200-node-datasheet --matmul-dtype bf16 \
  --name h200-node --memory-runs $M/runs --output "$WORK/h200_memory.toml"
expect "the shipped h200-node is that command's output" 0 "" -- \
  bash -c "diff <(grep -v -e --output '$WORK/h200_memory.toml') \
                 <(grep -v -e --output data/clusters/h200-node.toml)"
expect_one_line_error "calibrate --memory-runs refuses a file that is no measurement" \
  "profile.json: not a stratos.measurement/1 file \\(no ranks\\)" -- \
  "$STRATOS" calibrate --profile $R/profile --cluster h200-node-datasheet --matmul-dtype bf16 \
  --memory-runs $R/profile --output "$WORK/h200_none.toml"
expect_one_line_error "profile: unknown part" \
  '--parts = "gemm": must be one of "matmul", "layer", "collective"' -- \
  "$STRATOS" profile --parts gemm --output-dir "$WORK/profile"
# Calibration: fit the Alpa V100 profile, search on the calibrated file, reject a bad profile.
expect "calibrate writes a calibrated cluster file" 0 "wrote .*cal.toml" -- \
  "$STRATOS" calibrate --ring-links 6 --holdout 1x8 --output "$WORK/cal.toml"
expect "the fit table has held-out errors" 0 "all_reduce +hierarchical .*intra" -- \
  "$STRATOS" calibrate --ring-links 6 --holdout 1x8 --output "$WORK/cal.toml"
expect "the calibrated file says what it was fitted on" 0 "source = .*stratos calibrate --alpa-csv" -- \
  cat "$WORK/cal.toml"
expect "search accepts the calibrated cluster file" 0 "gap %" -- \
  "$STRATOS" search --model gpt3-1.3b --cluster "$WORK/cal.toml" --nodes 2 --global-batch 64 \
  --algo dp,grid --time-limit 60 --no-progress --output-dir "$WORK/cal-search"
expect "search finds the calibrated zoo cluster by name" 0 "gap %" -- \
  "$STRATOS" search --model gpt3-1.3b --cluster p3.16xlarge --nodes 2 --global-batch 64 \
  --algo grid --time-limit 60 --no-progress --output-dir "$WORK/cal-zoo"
expect "calibrate --framework-memory-runs takes the framework's memory from another GPU's runs" 0 \
  "framework memory from 10 runs on another device: 0.749 GiB outside the caching allocator" -- \
  "$STRATOS" calibrate --alpa-csv ../shared/data/alpa_v100_comm/alpa_v100_comm_1x1_to_2x8.csv \
  --cluster p3.16xlarge-datasheet --ring-links 6 --name p3.16xlarge \
  --framework-memory-runs experiments/gpu/results/h200-2026-11-27/runs --output "$WORK/p3_framework.toml"
expect "the shipped p3.16xlarge is that command's output (the V100's 16 GB kept)" 0 "" -- \
  bash -c "diff <(grep -v -e --output '$WORK/p3_framework.toml') \
                 <(grep -v -e --output data/clusters/p3.16xlarge.toml)"
expect_one_line_error "calibrate takes --memory-runs or --framework-memory-runs, not both" \
  "--memory-runs excludes --framework-memory-runs" -- \
  "$STRATOS" calibrate --memory-runs experiments/gpu/results/h200-2026-11-27/runs \
  --framework-memory-runs experiments/gpu/results/h200-2026-11-27/runs --output "$WORK/both.toml"
mkdir -p "$WORK/badprofile"
printf '{"schema": "stratos.profile/1", "device": "d", "backend": "b", "produced_by": "test"}\n' \
  >"$WORK/badprofile/profile.json"
printf 'm,n,k,dtype,flops,seconds\n' >"$WORK/badprofile/matmul.csv"
printf 'hidden,heads,seq_len,micro_batch,tensor_parallel,dtype,forward_flops,forward_seconds,backward_seconds\n' \
  >"$WORK/badprofile/layer.csv"
printf 'op,dtype,nodes,gpus_per_node,group_size,num_groups,crosses_nodes,bytes,seconds\nall_reduce,f16,1,8,8,1,0,1024,1e-4\nbroadcast,f16,1,8,8,1,0,1024,1e-4\n' \
  >"$WORK/badprofile/collective.csv"
cp "$WORK/cal.toml" "$WORK/cal.before"
expect_one_line_error "a bad profile row names file, line, column and rule" \
  'collective.csv:3: op = "broadcast": must be one of' -- \
  "$STRATOS" calibrate --profile "$WORK/badprofile" --output "$WORK/cal.toml"
expect "a failed calibration leaves the earlier file intact" 0 "" -- cmp "$WORK/cal.before" "$WORK/cal.toml"
expect_one_line_error "a bad holdout names the flag" "--holdout = 1x8/q2" -- \
  "$STRATOS" calibrate --holdout 1x8/q2 --output "$WORK/cal.toml"
expect "validate alpa-comm reports held-out errors against the target" 0 \
  "target: held-out collective MAPE <= 15%" -- \
  "$STRATOS" validate alpa-comm --output-dir "$WORK/validate"
expect "validate alpa-comm writes its figures" 0 '"held_out_2x8_group_16"' -- cat "$WORK/validate/summary.json"

# Co-search: a few steps end to end (the full default run takes ~9 minutes).
expect "cosearch runs end to end and prints the comparison" 0 "time to target" -- \
  "$STRATOS" cosearch --model gpt2 --nodes 2 --global-batch 64 --search-steps 6 \
  --warmup-steps 2 --batch-sizes 2,4 --batch-size 2 --eval-steps 10 --eval-every 5 --eval-windows 8 \
  --output-dir "$WORK/cosearch"
expect "cosearch writes curves for every plan" 0 "^throughput-only,10," -- cat "$WORK/cosearch/curves.csv"
expect "cosearch's curves say each plan's global batch" 0 "^no-compression,10,[0-9.e+-]+,[0-9.]+,64$" -- \
  cat "$WORK/cosearch/curves.csv"
expect "cosearch prices every global batch option" 0 '"global_batch": 128' -- \
  cat "$WORK/cosearch/summary.json"
expect "cosearch logs the batch logits" 0 "^6,batch,128," -- cat "$WORK/cosearch/alpha.csv"
expect "cosearch says its time axis is simulated" 0 "simulated" -- cat "$WORK/cosearch/summary.json"
expect "cosearch plots loss against simulated time" 0 "PNG" -- head -c 8 "$WORK/cosearch/loss_vs_time.png"
expect "cosearch's default base plan is data parallel over every device" 0 '"base_plan_source": "data parallel' -- \
  cat "$WORK/cosearch/summary.json"
expect "cosearch: no data-parallel plan fits is a result, not a crash" 1 "no data-parallel plan of gpt3-2.7b fits" -- \
  "$STRATOS" cosearch --model gpt3-2.7b --nodes 2 --global-batch 64 --output-dir "$WORK/cosearch-bad"
expect "cosearch takes relax's plan as the base" 0 "base plan \(relax, throughput only\)" -- \
  "$STRATOS" cosearch --model gpt3-1.3b --cluster p3.16xlarge --nodes 2 --global-batch 64 \
  --base-plan relax --search-steps 3 --warmup-steps 1 --batch-sizes 2 --batch-size 2 --eval-steps 2 --eval-every 1 \
  --eval-windows 4 --output-dir "$WORK/cosearch-relax"
expect_one_line_error "cosearch: a compression's parameter is checked by name" \
  "command line: --grad-compressions = \"powersgd\(rank=0\)\": rank must be an integer >= 1" -- \
  "$STRATOS" cosearch --grad-compressions "none,powersgd(rank=0)" --output-dir "$WORK/cosearch-bad"
expect_one_line_error "cosearch: compressions must start with none" \
  "--grad-compressions = \"?powersgd,none\"?: must start with none" -- \
  "$STRATOS" cosearch --grad-compressions powersgd,none --output-dir "$WORK/cosearch-bad"
expect_one_line_error "cosearch: a rule over two flags names both" \
  "command line: --warmup-steps = 10: must be < --search-steps = 10" -- \
  "$STRATOS" cosearch --search-steps 10 --warmup-steps 10 --output-dir "$WORK/cosearch-bad"
# init-search: a small run end to end, resumed, and its input rules.
INIT_FLAGS=(--outer-seeds 2 --candidates 4 --step-budget 40 --max-first-rung 20 --evaluation-steps 5
            --plateau-window 1 --batch-size 2 --validation-windows 4 --threads 1
            --nodes 2 --global-batch 64 --cluster-model gpt3-1.3b)
expect "init-search runs end to end and prints the comparison" 0 "compute to target: search" -- \
  "$STRATOS" init-search "${INIT_FLAGS[@]}" --output-dir "$WORK/init"
expect "init-search prices the search on the target cluster" 0 '"search_seconds_to_target"' -- \
  cat "$WORK/init/summary.json"
expect "init-search writes every candidate's curve" 0 "^2,search,3,kaiming," -- cat "$WORK/init/curves.csv"
expect "init-search plots loss against compute" 0 "PNG" -- head -c 8 "$WORK/init/loss_vs_compute.png"
expect "init-search writes the default initialization's curve" 0 "^1,default,0,gpt2," -- \
  cat "$WORK/init/curves.csv"
cp "$WORK/init/summary.json" "$WORK/init-summary-before.json"
expect "init-search --resume keeps finished seeds" 0 "seed 2 \(2/2\): kept from" -- \
  "$STRATOS" init-search "${INIT_FLAGS[@]}" --output-dir "$WORK/init" --resume
expect "a resumed init-search reports the same seeds" 0 "" -- \
  cmp <(grep -v train_seconds "$WORK/init/summary.json") \
      <(grep -v train_seconds "$WORK/init-summary-before.json")
expect_one_line_error "init-search: an unknown scheme" \
  "command line: --schemes = \"he\": must be one of gpt2, normal, xavier, kaiming" -- \
  "$STRATOS" init-search --schemes gpt2,he --output-dir "$WORK/init-bad"
expect_one_line_error "init-search: a rule over two flags names both" \
  "command line: --step-budget = 100: must be >= --max-first-rung = 200" -- \
  "$STRATOS" init-search --step-budget 100 --output-dir "$WORK/init-bad"
expect_one_line_error "init-search: eta below 2" "command line: --eta = 1: must be >= 2" -- \
  "$STRATOS" init-search --eta 1 --output-dir "$WORK/init-bad"
echo "corrupt" > "$WORK/init/seed_1/result.json"
expect_one_line_error "init-search: a corrupt seed result names the file" \
  "seed_1/result.json: not JSON" -- \
  "$STRATOS" init-search "${INIT_FLAGS[@]}" --output-dir "$WORK/init" --resume
expect_one_line_error "cosearch: the batch splits over the DP replicas" \
  "command line: --batch-sizes = 3: must be divisible by --dp-replicas = 2" -- \
  "$STRATOS" cosearch --batch-sizes 3,6 --batch-size 3 --output-dir "$WORK/cosearch-bad"
expect_one_line_error "cosearch: the reference batch is one of the options" \
  "command line: --batch-size = 6: must be one of --batch-sizes" -- \
  "$STRATOS" cosearch --batch-size 6 --output-dir "$WORK/cosearch-bad"
expect_one_line_error "cosearch: a batch option is listed once" \
  "command line: --batch-sizes = 8: is listed twice" -- \
  "$STRATOS" cosearch --batch-sizes 8,4,8 --output-dir "$WORK/cosearch-bad"
expect_one_line_error "cosearch: a batch option makes a whole target batch" \
  "command line: --batch-sizes = 6: must make a whole target batch: --global-batch 99 x 6 / --batch-size 8" -- \
  "$STRATOS" cosearch --global-batch 99 --batch-sizes 6,8 --output-dir "$WORK/cosearch-bad"
expect_one_line_error "cosearch: a batch option must split over the base plan's data parallelism" \
  "command line: --batch-sizes = 2: no number of microbatches splits global batch 16 over" -- \
  "$STRATOS" cosearch --global-batch 64 --batch-sizes 2,8 --output-dir "$WORK/cosearch-bad"
expect "cosearch on two sites: data parallel inside each site, pipelined over the WAN" 0 \
  "base plan \(data parallel inside each node group, one pipeline stage per group\): 2 stages" -- \
  "$STRATOS" cosearch --cluster two-site-v100 --nodes ohio=4,virginia=4 --global-batch 64 --search-steps 3 \
  --warmup-steps 1 --batch-sizes 2 --batch-size 2 --eval-steps 2 --eval-every 1 --eval-windows 4 \
  --output-dir "$WORK/cosearch-two-site"
expect "search with --grad-compressions may pick PowerSGD" 0 "powersgd" -- \
  "$STRATOS" search --model gpt3-1.3b --cluster p3.16xlarge --nodes 16 --global-batch 512 \
  --algo dp --grad-compressions none,powersgd --no-progress --output-dir "$WORK/search-compressed"

# Experiment runner: a run stopped part-way and resumed gives the results of an uninterrupted run,
# never reruns a finished cell; spec errors are one-line input errors; the report writes its tables.
cat >"$WORK/exp.toml" <<'SPEC'
[experiment]
time_limit_seconds = 20
seeds = [0, 1]
[[family]]
name = "gpt"
models = ["gpt3-1.3b"]
clusters = ["dgx-a100-80gb"]
nodes = [1, 2]
global_batches = [64]
[[family]]
generator = "nonuniform"
layers = [16]
instances = 2
clusters = ["p3.16xlarge"]
nodes = [1]
global_batches = [64]
[[searcher]]
algorithm = "dp"
[[searcher]]
name = "local-2"
algorithm = "local"
options = { starts = 2 }
[[searcher]]
algorithm = "grid"
SPEC
# Compares two results.csv files without the columns that measure time or memory.
cat >"$WORK/same_results.py" <<'PY'
import csv, sys
def rows(path):
    return [tuple(v for k, v in r.items() if k not in ("wall_seconds", "peak_memory_MiB", "message"))
            for r in csv.DictReader(open(path))]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
print(len(b), "rows", len({r[0] for r in b}), "distinct cells")
sys.exit(0 if a == b else 1)
PY
expect "experiment run: every cell finishes" 0 "24 of 24 cells finished" -- \
  "$STRATOS" experiment run "$WORK/exp.toml" --output-dir "$WORK/exp-full"
expect "experiment run: stops after --max-cells" 1 "5 of 24 cells finished" -- \
  "$STRATOS" experiment run "$WORK/exp.toml" --output-dir "$WORK/exp-part" --max-cells 5
(cd "$WORK/exp-part/cells" && md5sum *.json >"$WORK/exp-part.md5")
"$STRATOS" experiment run "$WORK/exp.toml" --output-dir "$WORK/exp-part" >/dev/null 2>&1 &
sleep 3
kill -INT $! 2>/dev/null
wait $! 2>/dev/null
expect "experiment run: an interrupted run resumes and finishes" 0 "24 of 24 cells finished" -- \
  "$STRATOS" experiment run "$WORK/exp.toml" --output-dir "$WORK/exp-part"
expect "experiment run: resumed results equal the uninterrupted run's (24 distinct cells)" 0 \
  "24 rows 24 distinct cells" -- \
  python3 "$WORK/same_results.py" "$WORK/exp-full/results.csv" "$WORK/exp-part/results.csv"
expect "experiment run: cells finished before the stop were not run again" 0 "" -- \
  sh -c 'cd "$0/cells" && md5sum --quiet -c "$1"' "$WORK/exp-part" "$WORK/exp-part.md5"
# A rebuild during a long run: the cells run the runner's own binary, not what its path holds
# by then (the binary replaced by `false` after the run started: cells that exec'd the path
# would end "exited with 1 without a result").
cp "$STRATOS" "$WORK/stratos-moved"
"$WORK/stratos-moved" experiment run "$WORK/exp.toml" --output-dir "$WORK/exp-moved" --jobs 1 \
  --max-cells 4 >/dev/null 2>&1 &
moved_run=$!
sleep 1
cp /bin/false "$WORK/stratos-new" && mv -f "$WORK/stratos-new" "$WORK/stratos-moved"
wait $moved_run
expect "experiment run: a binary replaced under a running experiment does not fail its cells" 0 \
  "^4$" -- sh -c 'grep -l "\"status\": \"ok\"" "$0"/cells/*.json | wc -l' "$WORK/exp-moved"
sed 's/seeds = \[0, 1\]/seeds = [0, 1, 2]/' "$WORK/exp.toml" >"$WORK/exp2.toml"
expect_one_line_error "experiment run: a changed spec is refused" "holds the results of another spec" -- \
  "$STRATOS" experiment run "$WORK/exp2.toml" --output-dir "$WORK/exp-full"
expect "experiment run --extend keeps the finished cells and runs the new ones" 0 \
  "24 finished earlier, 12 to run" -- \
  "$STRATOS" experiment run "$WORK/exp2.toml" --output-dir "$WORK/exp-full" --extend
expect "experiment report: per family, variant medians and worst gaps" 0 \
  "\| local-2 \| 8 \| 8 \|" -- "$STRATOS" experiment report "$WORK/exp-part"
expect "experiment report: win/tie/loss table" 0 "Win / tie / loss" -- cat "$WORK/exp-part/report.md"
expect "experiment report: the DP optimum is proven on every instance" 0 \
  "4 instances \(4 with a proven optimum\)" -- cat "$WORK/exp-part/report.md"
printf '[[family]]\nmodels = ["gpt3-1.3b"]\nclusters = ["dgx-a100-80gb"]\n[[searcher]]\nalgorithm = "relax"\noptions = { iterations = "many" }\n' >"$WORK/bad.toml"
expect_one_line_error "experiment spec: a bad option value names file, key, value and rule" \
  'bad.toml: searcher\[0\].options: relax.iterations = "many": must be an integer' -- \
  "$STRATOS" experiment run "$WORK/bad.toml" --output-dir "$WORK/exp-bad"
printf '[[family]]\nmodels = ["gpt3-1.3b"]\nclusters = ["dgx-a100-80gb"]\n[[searcher]]\nalgorithm = "simplex"\n' >"$WORK/bad.toml"
expect_one_line_error "experiment spec: an unknown searcher is named" \
  'bad.toml: searcher\[0\].algorithm = "simplex": unknown algorithm' -- \
  "$STRATOS" experiment run "$WORK/bad.toml" --output-dir "$WORK/exp-bad"
expect "experiment options lists relax.polish" 0 "relax.polish \(text, default \"iterated\"\)" -- \
  "$STRATOS" experiment options relax
expect_one_line_error "search --option: an unknown option is named" \
  "relax.iteratons = \"3\": unknown option" -- \
  "$STRATOS" search --algo relax --option relax.iteratons=3 --output-dir "$WORK/opt"
expect_one_line_error "search --option: a bad value names the option as written" \
  "command line: relax.iterations = 0: must be >= 1" -- \
  "$STRATOS" search --algo relax --option relax.iterations=0 --output-dir "$WORK/opt"
expect "search --dp-bucket-mb prices DP gradient buckets and records them" 0 '"dp_bucket_bytes": 26214400' -- \
  sh -c '"$0" search --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 2 --global-batch 64 --algo dp --dp-bucket-mb 25 --no-progress --output-dir "$1" >/dev/null && cat "$1/summary.json"' \
  "$STRATOS" "$WORK/buckets"
expect_one_line_error "--dp-bucket-mb below 0 is refused" "--dp-bucket-mb.*must be >= 0" -- \
  "$STRATOS" evaluate --dp-bucket-mb=-1 --tp 1 --pp 1 --dp 8 --micro-batch 1
expect "search --option reaches the searcher and is recorded" 0 '"relax.polish": "none"' -- \
  sh -c '"$0" search --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 --algo relax --option relax.polish=none --no-progress --output-dir "$1" >/dev/null && cat "$1/summary.json"' \
  "$STRATOS" "$WORK/opt"

# Plans out and in (issue 14): the running example of ../shared/formats imported, exported to
# every target, run as written (a stand-in torchrun prints the arguments it receives, one per
# line) and imported back with the same estimate.
EXAMPLE=../shared/formats/megatron_args.sh
H100=(--cluster dgx-h100 --nodes 2)
expect "import reads Megatron-LM's launch script" 0 "your configuration: 0\.[0-9]+ s/iteration" -- \
  "$STRATOS" import --from megatron "$EXAMPLE" "${H100[@]}" --plan-output "$WORK/imported.json"
expect "the imported plan is interleaved as written" 0 '"virtual_stages": 2' -- cat "$WORK/imported.json"
LLAMA=(--model llama3-8b --seq-length 4096 "${H100[@]}")
for target in megatron deepspeed torchtitan torch-pipelining; do
  expect "export --to $target --nearest writes its files" 0 "wrote " -- \
    "$STRATOS" export "${LLAMA[@]}" --plan "$WORK/imported.json" --to "$target" --nearest \
    --output "$WORK/export/$target"
done
mkdir -p "$WORK/bin"
printf '#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n' >"$WORK/bin/torchrun"
chmod +x "$WORK/bin/torchrun"
# The example overlaps the gradient reduction (--overlap-grad-reduce, Megatron-Core's default
# bucket of max(40M, 1M x DP) parameters, 4 bytes each) and the parameter all-gather: exported
# with the same pricing, it writes the flags back.
expect "import reads Megatron-LM's --overlap-grad-reduce as DP gradient buckets" 0 \
  "DP gradients reduced in buckets of 40 M parameters under the backward pass .*--overlap-param-gather" -- \
  "$STRATOS" import --from megatron "$EXAMPLE" "${H100[@]}"
expect "export --to megatron --dp-bucket-mb writes --overlap-grad-reduce and the bucket" 0 \
  "wrote " -- \
  "$STRATOS" export "${LLAMA[@]}" --plan "$WORK/imported.json" --to megatron --nearest \
  --dp-bucket-mb 152.587890625 --dp-overlap 1 --output "$WORK/export/megatron"
expect "... as Megatron-LM's flags" 0 "--overlap-grad-reduce --ddp-bucket-size 40000000 --overlap-param-gather" -- \
  sh -c 'grep -A2 -- "--overlap-grad-reduce" "$0" | tr -s " \n" " "' "$WORK/export/megatron/megatron_args.sh"
expect "the exported script hands Megatron the layout as one argument" 0 \
  '^Et\*3\|t\*4\|t\*4\|t\*4\|t\*4\|t\*4\|t\*4\|t\*5L$' -- \
  env PATH="$WORK/bin:$PATH" bash "$WORK/export/megatron/megatron_args.sh"
expect "export then import gives the same estimate" 0 "same" -- sh -c \
  'a=$("$0" import --from megatron "$1" --cluster dgx-h100 | grep "your configuration"); b=$("$0" import --from megatron "$2" --cluster dgx-h100 | grep "your configuration"); [ -n "$a" ] && [ "$a" = "$b" ] && echo same' \
  "$STRATOS" "$EXAMPLE" "$WORK/export/megatron/megatron_args.sh"
expect "torchtitan's job TOML reads back" 0 "your configuration" -- \
  "$STRATOS" import --from torchtitan "$WORK/export/torchtitan/torchtitan_job.toml" "${H100[@]}"
expect "deepspeed's launch script reads back with its engine JSON" 0 "your configuration" -- \
  "$STRATOS" import --from deepspeed "$WORK/export/deepspeed/deepspeed_launch.sh" --cluster dgx-h100
expect_one_line_error "a plan the target cannot run is refused naming the key, value and rule" \
  "imported.json: virtual_stages = 2: deepspeed's pipeline engine has no interleaved schedule" -- \
  "$STRATOS" export "${LLAMA[@]}" --plan "$WORK/imported.json" --to deepspeed \
  --output "$WORK/export/megatron"
expect "a refused export leaves the earlier files in place" 0 "" -- \
  test -f "$WORK/export/megatron/megatron_args.sh"
expect "export --nearest says what changed and the cost" 0 "changed: stages: .*predicted iteration" -- \
  sh -c '"$0" export "$@" | tr "\n" " "' "$STRATOS" "${LLAMA[@]}" --plan "$WORK/imported.json" \
  --to deepspeed --nearest --output "$WORK/export/nearest"
expect "import --search prints the best plan beside the configuration" 0 "best found \(dp\)" -- \
  "$STRATOS" import --from megatron "$EXAMPLE" "${H100[@]}" --search --algo dp --time-limit 60
expect "search --export reports a refused export and still writes the search" 1 \
  "--export torchtitan: .*torchtitan trains its registered llama3 flavors" -- \
  "$STRATOS" search --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 \
  --algo dp --no-progress --export torchtitan --output-dir "$WORK/search-export"
expect "... and its summary" 0 "" -- test -f "$WORK/search-export/summary.json"
expect "search --export megatron writes the launch script" 0 "wrote .*/export/" -- \
  "$STRATOS" search --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 \
  --algo dp --no-progress --export megatron --output-dir "$WORK/search-export"
expect "search --export megatron prices Megatron-LM's fp32 gradients" 0 \
  "priced as megatron runs it: gradients accumulated and reduced in fp32" -- \
  "$STRATOS" search --model gpt3-1.3b --cluster dgx-a100-80gb --nodes 1 --global-batch 64 \
  --algo dp --no-progress --export megatron --output-dir "$WORK/search-export"
# A plan searched with 2-byte gradients that only fits so: its Megatron export says it does not.
"$STRATOS" search --model gpt3-6.7b --cluster dgx-a100-80gb --nodes 2 --global-batch 512 \
  --algo dp --no-progress --output-dir "$WORK/search-6.7b" >/dev/null 2>&1
expect "export --to megatron says a plan does not fit Megatron-LM's fp32 gradients" 0 \
  "DOES NOT FIT: stage 0 needs .*search --export megatron" -- sh -c '"$0" "$@" | tr "\n" " "' \
  "$STRATOS" export --plan "$WORK/search-6.7b/plans/dp.json" --model gpt3-6.7b \
  --cluster dgx-a100-80gb --nodes 2 --to megatron --output "$WORK/export-6.7b"

# Workers die with their launcher (issue 18, defect 8): kill -9 `stratos run` mid-training, and
# its workers (their argument is the run's run_options.json) are gone within 10 s.
workers_of() { pgrep -f -- "$WORK/orphans/run_options.json" | wc -l; }
"$STRATOS" run --dp 2 --micro-batch 2 --global-batch 4 --steps 1000000 --deadline 300 \
  --output-dir "$WORK/orphans" >/dev/null 2>&1 &
launcher=$!
for _ in $(seq 600); do [ "$(workers_of)" -ge 2 ] && break; sleep 0.1; done
started=$(workers_of)
kill -9 "$launcher"
wait "$launcher" 2>/dev/null
for _ in $(seq 100); do [ "$(workers_of)" -eq 0 ] && break; sleep 0.1; done
left=$(workers_of)
pkill -9 -f -- "$WORK/orphans/run_options.json"
if [ "$started" -eq 2 ] && [ "$left" -eq 0 ]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAILED: workers die with their launcher ($started workers started, $left left after kill -9)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
