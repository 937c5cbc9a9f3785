//! gasan-runtime: the preloaded library (driver-API interposition, allocator, shadow poisoning,
//! module loading, error ring, reports) and the gasan-run launcher.
//!
//! Concerns, one module each:
//! - start-up and options: [`init`] (what runs at load, before `main`), [`options`] (the options
//!   table, parsed once per process), [`suppressions`] (the suppressions file's format),
//!   [`call_times`] (where a run's host time goes, `call_times=1`);
//! - the driver: [`driver`] (the real libcuda, its one table of entry points (`sys`), the
//!   `result` layer for gasan's own calls over it, and the pool backend's functions built from it), [`hook_abi`] (hooks' prototypes checked against cudarc at compile time),
//!   [`interpose`] (dlsym / cuGetProcAddress / export tables), [`hooks`] (the intercepted calls,
//!   by object: memory, copies, streams, launches, loading), [`library`] (how other libraries'
//!   functions are reached: NVRTC, nvJitLink, NCCL, libc's signal functions);
//! - memory: [`allocator`] (pool-backed device allocator, redzones, pointer tags, quarantine),
//!   [`described`] (what reports say of an address and its block), [`device_heap`] (the checked
//!   in-kernel heap), [`side_table`] (the driver's managed and host memory), [`outside`] (the
//!   device table of memory outside the pool), [`managed`] (where managed pool blocks live),
//!   [`copies`] (device ranges of 2D/3D copies), [`arg_bounds`] (block bounds carried in launch
//!   arguments), [`signals`] (gasan's SIGSEGV handler beside the program's);
//! - modules: [`modules`] (checked module loading), [`ptx_header`] (which PTX versions and
//!   targets are checked), [`prefetch`] (the program's modules looked up before their first
//!   launch), [`link`] (the application's own cuLink* links), [`cache`] (the on-disk cache of
//!   checked modules), [`sass`] (checked PTX compiled to cubins with ptxas), [`control`] (control
//!   blocks and the device heap's lifetime), [`jit_origin`] (which framework made the cubins loaded,
//!   for the summary);
//! - errors: [`ring`] (device error ring), [`faults`] (GPU fault addresses), [`errors`] (the ring
//!   drained into reports, host errors, exit), [`report`] (each report kind described once,
//!   rendered as ASan-style text or JSON);
//! - [`devices`] (one slot per device, each set up at its first use), [`device`] (what one GPU
//!   holds, and how owners reach the devices without naming the state), [`log`] (messages by
//!   verbosity), [`state`] (the lazy process state: it holds the per-process owners, the report
//!   sink [`errors::Errors`], [`control::ControlBlocks`], the module registry and the side table,
//!   and the per-device ones).
//!
//! Data flows one way, and no module imports another that imports it back (tests/import_cycles.rs):
//! interpose resolves the driver's entry points into hooks; hooks call into modules, link,
//! allocator and state; modules and link call the instrumenter; state owns the pool and reporter.
//! Where a lower layer must call a higher one (the state starting the prefetch, loads taking
//! what it prepared), [`init::at_load`] hands it the function.
//!
//! When loaded as a shared library (preloaded), [`init::at_load`] runs before the program's
//! `main`: bad `GASAN_OPTIONS` end the process with status 2 before the program runs, and the
//! program's modules start being looked up in the cache for the GPU the last run set up
//! ([`prefetch::start_early`]).

pub mod allocator;
pub mod arg_bounds;
pub mod cache;
pub mod call_times;
pub mod control;
pub mod copies;
pub mod described;
pub mod device;
pub mod device_heap;
pub mod devices;
pub mod driver;
pub mod errors;
pub mod faults;
pub mod hook_abi;
pub mod hooks;
pub mod init;
pub mod interpose;
pub mod jit_origin;
pub mod library;
pub mod link;
pub mod log;
pub mod managed;
pub mod modules;
pub mod options;
pub mod outside;
pub mod pool_stats;
pub mod prefetch;
pub mod ptx_header;
pub mod report;
pub mod ring;
pub mod sass;
pub mod side_table;
pub mod signals;
pub mod state;
pub mod suppressions;

// Runs init::at_load when the library is loaded, before the program's main.
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = init::at_load;
