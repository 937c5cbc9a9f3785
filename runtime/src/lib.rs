//! gasan-runtime: the preloaded library (driver-API interposition, allocator, shadow poisoning,
//! module loading, error ring, reports) and the gasan-run launcher.
//!
//! Concerns, one module each: [`options`], [`allocator`] (pool-backed device allocator, redzones,
//! quarantine), [`report`] (ASan-style text/JSON), [`driver`] (the real libcuda), [`interpose`]
//! (dlsym / cuGetProcAddress / export tables), [`hooks`] (intercepted calls), [`modules`] (checked
//! module loading), [`device_heap`] (the checked in-kernel heap's region and descriptions), [`cache`] (the on-disk cache of checked modules), [`sass`] (checked PTX
//! compiled to cubins with ptxas), [`ring`] (device error ring), [`state`] (lazy global state).
//!
//! When loaded as a shared library (preloaded), [`options::at_load`] runs before the program's
//! `main`: bad `GASAN_OPTIONS` end the process with status 2 before the program runs.

pub mod allocator;
pub mod cache;
pub mod copies;
pub mod device_heap;
pub mod driver;
pub mod faults;
pub mod hooks;
pub mod interpose;
pub mod link;
pub mod modules;
pub mod options;
pub mod report;
pub mod ring;
pub mod sass;
pub mod side_table;
pub mod state;

// Runs options::at_load when the library is loaded, before the program's main.
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = options::at_load;
