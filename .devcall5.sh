python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.tcache
cat .tcache_parts/tcache.tgz.* | tar xzf -
( while sleep 15; do echo "t=$SECONDS $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader | tr '\n' ' ') procs=$(pgrep -fc lat_core.train)"; done ) >> $OUT/monitor.log 2>&1 &
timeout 45 python bench/bench_multigpu.py --kind pretrain --gpus 0,1 --iterations 20 > $OUT/pretrain.log 2>&1; echo "pretrain rc $?"
cut -c1-330 $OUT/pretrain.log | tail -3
timeout 60 python bench/bench_multigpu.py --kind lora --gpus 0,1 --steps 20 > $OUT/lora.log 2>&1; echo "lora rc $?"
cut -c1-330 $OUT/lora.log | tail -3
pkill -f lat_core; sleep 1
timeout 165 python bench/bench_suite_throughput.py --gpu 0 --steps 10 --sides old,lat --json $OUT/suite.json > $OUT/suite.log 2>&1; echo "suite rc $?"
grep -v "^ *[0-9]  *tiny\|^\[" $OUT/suite.log | tail -40
for f in /tmp/lat-suite-bench/*/tiny-sst2_seed1/lora_qkvo_r8_a16/train.log /tmp/lat-multigpu-bench/*/train.log; do echo "== $f"; grep -v "^step" $f | tail -n 25; done > $OUT/tails.txt 2>&1
