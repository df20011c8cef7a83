#!/usr/bin/env bash
# Re-run the experiments behind docs/RESULTS.md, in the order in which they build on each other,
# each one taking the finished runs it shares with the folders made before it (--reuse: the same
# run id and fingerprint, that is the same settings and data; see docs/EXPERIMENTS.md).
#
#   bash experiments/reproduce.sh                              # every experiment, in RESULTS.md's order
#   bash experiments/reproduce.sh mq2008_blend mq2008_stack    # these, reusing what OUT holds already
#
# OUT     where the experiment folders go (default runs/reproduce-<commit>; a relative path is taken
#         from the repository root). A fingerprint covers the
#         settings and the data, not the code: folders are reused only from OUT, so that one code
#         state makes every table; a new commit gets a new OUT.
# WORKERS runs in parallel (default auto).
# The command is .venv/bin/smoothrank when the checkout has one (bash scripts/test or
# bash scripts/demo makes it), else smoothrank on the PATH; SMOOTHRANK overrides it (split on
# spaces, e.g. "python -m smoothrank").
# Every command, its exit status and its wall time go to OUT/reproduce.log. The first experiment
# with a failed run stops the script (run it again: finished runs are not redone).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# docs/RESULTS.md's experiments, in its order (an experiment after those it reuses runs from).
ORDER=(
    mq2008 mq2008_neuralndcg_recheck mq2008_mlp mq2008_mlp_long mq2008_ensemble mq2008_linear
    mq2008_blend mq2008_stack mq2008_refit mq2008_boosting mq2008_boosting_lr mq2008_boosting_curvature
    mq2008_stack_boosted mq2008_lambdarank_bagged mq2008_list_mle_boosted_hessians mq2008_boosted_trees
    mq2008_ensemble_size mq2008_boosted_map mq2008_refit_boosted mq2008_ensemble_map
    lightgbm_example lightgbm_example_boosting mslr_sample
)
# Specs that are not a table of RESULTS.md: a smoke grid, and the thread-count study, which runs
# one spec twice and compares the folders (see its header).
NOT_IN_ORDER=(mq2008_gbdt_fold1 mq2008_threads)

if [ -n "${SMOOTHRANK:-}" ]; then
    read -r -a cmd <<< "$SMOOTHRANK"
elif [ -x "$root/.venv/bin/smoothrank" ]; then
    cmd=("$root/.venv/bin/smoothrank")
else
    cmd=(smoothrank)
fi
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
out="${OUT:-runs/reproduce-$commit}"
workers="${WORKERS:-auto}"
names=("$@")
[ ${#names[@]} -eq 0 ] && names=("${ORDER[@]}")
for name in "${names[@]}"; do
    [ -f "experiments/$name.yaml" ] || { echo "reproduce.sh: no spec experiments/$name.yaml" >&2; exit 2; }
done
if [ -n "$(git status --porcelain -- smoothrank 2>/dev/null)" ]; then
    echo "reproduce.sh: warning: smoothrank/ has uncommitted changes; OUT is named after $commit" >&2
fi

mkdir -p "$out"
log="$out/reproduce.log"
for name in "${names[@]}"; do
    reuse=()
    for folder in "$out"/*/; do
        folder="${folder%/}"
        [ -d "$folder/runs" ] && [ "$(basename "$folder")" != "$name" ] && reuse+=(--reuse "$folder")
    done
    # ${reuse[@]+...}: an empty array under set -u is an error before bash 4.4
    line=("${cmd[@]}" experiment "experiments/$name.yaml" --out "$out/$name" --workers "$workers"
          ${reuse[@]+"${reuse[@]}"})
    echo "$(date -u +%FT%TZ) $commit: ${line[*]}" | tee -a "$log"
    start=$(date +%s)
    status=0
    "${line[@]}" || status=$?
    echo "$(date -u +%FT%TZ) $name: exit $status, $(( $(date +%s) - start )) s" | tee -a "$log"
    [ "$status" -eq 0 ] || exit "$status"
done
