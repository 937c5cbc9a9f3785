#!/usr/bin/env bash
# (GPU machine, repository root; gasan binaries in build/bin.) Used for runtime/results.md, H100 2026-12-05.
B=$(realpath build/bin)
SP=$(python3 -c "import jax,os;print(os.path.dirname(os.path.dirname(jax.__file__)))")
for f in $(find $SP -name "*.so" -path "*jax*" 2>/dev/null | xargs grep -l "cuMemAlloc\|cuMemCreate" 2>/dev/null | head -5); do echo "== $f"; nm -D --undefined-only $f 2>/dev/null | grep -E " cu(Mem|Init|GetProc)" | head; strings $f | grep -E "^cu(MemAlloc|MemCreate|MemMap|MemAddressReserve|MemAllocAsync|MemAllocFromPool)[A-Za-z_0-9]*$" | sort -u | tr '\n' ' '; echo; done
export TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=cuda_executor=3,cuda_driver=3,gpu_executor=3,stream_executor_memory_allocator=3,se_gpu_pjrt_client=3,gpu_helpers=3,pjrt_stream_executor_client=2
timeout 60 $B/gasan-run --verbosity 2 -- python3 benches/diag/jax/pallas_past_end.py 1 > /tmp/jd3.txt 2>&1; echo rc $?
grep -iE "alloc|vmm|cuMem|shift" /tmp/jd3.txt | grep -v "cuGetProcAddress" | cut -c1-220 | head -40
