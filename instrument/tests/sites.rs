//! Site locations: what a report names as the access's source line.

use gasan_instrument::ptx::{instrument_ptx, InstrumentOptions};

/// An access nvcc inlined from a CUDA header (`atomicAdd`: `.loc 2 107 3, function_name ...,
/// inlined_at 1 5 30`) is reported at its call site in the program's own file, not in the header.
#[test]
fn inlined_header_code_is_placed_at_its_call_site() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\
               .visible .entry k(.param .u64 p)\n{\n\t.reg .b64 %rd<3>;\n\t.reg .b32 %r<2>;\n\
               \t.loc\t1 5 0\n\tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd2, %rd1;\n\
               \t.loc\t2 107 3, function_name $L__info_string0, inlined_at 1 5 30\n\tatom.global.add.u32 %r1, [%rd2], 1;\n\
               \t.loc\t1 6 1\n\tld.global.u32 %r1, [%rd2+4];\n\tret;\n}\n\
               \t.file\t1 \"/src/app.cu\"\n\t.file\t2 \"/cuda/include/device_atomic_functions.hpp\"\n";
    let r = instrument_ptx(ptx, &InstrumentOptions { optimize: false, ..Default::default() }).unwrap();
    let locs: Vec<(String, u32, u32)> = r.sites.sites.iter().filter_map(|s| s.loc.as_ref()).map(|l| (l.file.clone(), l.line, l.col)).collect();
    assert_eq!(locs, vec![("/src/app.cu".to_string(), 5, 30), ("/src/app.cu".to_string(), 6, 1)], "{:?}", r.sites.sites);
}
