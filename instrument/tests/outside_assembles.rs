//! Outside checks' output must assemble where the default output does (issue 37, defect 2):
//! cub's `DeviceRadixSortOnesweepKernel` (in `cub::DeviceRadixSort`, so in `thrust::sort`),
//! checked with outside checks, made ptxas refuse the module ("Register allocation failed with
//! register count of '7'"): the verdict's scan of the outside table was a loop inside each stub
//! that resumes, so a loop on the kernel's path, around which every predicate live at the check
//! had to stay live. The scan is a called function now (outside.rs).

mod common;
use common::*;
use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};
use std::ffi::OsStr;

#[test]
fn thrust_sort_with_outside_checks_assembles() {
    let dir = scratch("outside-thrust-sort");
    let ptx = nvcc_ptx_of(
        &dir,
        "thrust_sort",
        "#include <thrust/device_vector.h>\n#include <thrust/sort.h>\n\
         int main() { thrust::device_vector<int> v(1 << 20, 1); thrust::sort(v.begin(), v.end()); return 0; }\n",
    );
    assert!(ptx.contains("DeviceRadixSortOnesweepKernel"), "the program has the onesweep kernel");
    let sets = [
        // The clean twin: the default rewrite.
        ("default", InstrumentOptions::default()),
        ("outside", InstrumentOptions { outside_checks: true, ..Default::default() }),
        ("outside-aligned-recover", InstrumentOptions { outside_checks: true, aligned_pool: true, recover: true, ..Default::default() }),
    ];
    for (name, opts) in sets {
        let r = instrument_ptx(&ptx, &opts).unwrap();
        let f = dir.join(format!("{name}.ptx"));
        std::fs::write(&f, &r.ptx).unwrap();
        // `-c`: the module has extern and weak functions.
        run_tool("ptxas", &[OsStr::new("-arch=sm_90"), OsStr::new("-c"), f.as_os_str(), OsStr::new("-o"), dir.join(format!("{name}.cubin")).as_os_str()]);
    }
}
