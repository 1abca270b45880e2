#!/usr/bin/env bash
# Nsight Compute of the search kernels against CUDASW++4.0 (docs/benchmarks.md, "Where the
# cycles go"): two queries (464 + 567 residues, the pair one packed launch scores),
# Swiss-Prot 12k, the same scoring. Run from the repository root on the GPU machine,
# swdask importable, CUDASW++ built in .anchors/cudasw4 (see
# ../shared/anchors/build-cudasw4.sh); writes $OUT/ncu.tar.gz (set OUT first). It profiles
# the search's default kernel (the scan kernel; SWDASK_SEARCH_KERNEL=ends the kernel with
# end cells: the detail regex inter_task_dpx matches both families), with the stall
# reasons of its hottest instructions (SourceCounters).
set -u
python3 - <<'PY'
seqs = open('.anchors/cudasw4/allqueries.fasta').read().split('>')[1:]
# the pair of 464 and 567 residues the benchmark packs into one launch (s16x2 halves)
pick = [s for s in seqs if any(n in s.split('\n')[0] for n in ('P01008', 'P03435'))]
open('/tmp/q_pair.fasta', 'w').write(''.join('>' + s for s in pick))
PY
python3 -m swdask ingest tests/data/sprot12071.fasta.gz -o /tmp/db1.store --force --quiet
mkdir -p /tmp/cdb1; .anchors/cudasw4/makedb tests/data/sprot12071.fasta.gz /tmp/cdb1/db > /dev/null 2>&1
S="search /tmp/q_pair.fasta /tmp/db1.store -o /tmp/n.parquet --device gpu --max-hits 10 --gap-open 10 --gap-extend 1 --force"
C=".anchors/cudasw4/align --query /tmp/q_pair.fasta --db /tmp/cdb1/db --top 10 --singlePassType DPXs16 --manyPassType_small DPXs16 --manyPassType_large DPXs32 --uploadFull"
python3 -m swdask $S 2>&1 | tail -1
M=gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active
timeout 35 ncu --metrics $M --csv python3 -m swdask $S > /tmp/ncu_swdask.csv 2>&1
timeout 30 ncu --metrics $M --csv $C > /tmp/ncu_cudasw4.csv 2>&1
SEC="--section SpeedOfLight --section Occupancy --section LaunchStats --section InstructionStats --section WarpStateStats --section ComputeWorkloadAnalysis --section SchedulerStats --section SourceCounters --print-details all"
timeout 45 ncu $SEC --kernel-name-base mangled --kernel-name regex:inter_task_dpx --launch-count 1 python3 -m swdask $S > /tmp/ncu_swdask_detail.txt 2>&1
timeout 30 ncu $SEC --kernel-name regex:dpx_s16 --launch-count 1 $C > /tmp/ncu_cudasw4_detail.txt 2>&1
tar -czf $OUT/ncu.tar.gz -C /tmp ncu_swdask.csv ncu_cudasw4.csv ncu_swdask_detail.txt ncu_cudasw4_detail.txt
grep -c . /tmp/ncu_*.csv /tmp/ncu_*detail.txt
