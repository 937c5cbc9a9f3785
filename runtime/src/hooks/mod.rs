//! Bodies of the intercepted driver calls. Each hook is exported under the driver's exact symbol
//! name (for `-lcuda` apps) and listed in [`table`] (for `cuGetProcAddress` / `dlsym`).
//!
//! Inside a hook, `real(args…)` calls the driver's own function of the same exact name.
//!
//! The hooks, by the object they act on: `memory` (allocation, frees, pointer queries),
//! `copies` (host API copies and sets), `streams` (synchronization, stream capture),
//! `launches` (launches and the kernel handles they name), `loading` (modules, libraries,
//! links, cudart's private loaders). Each is declared once, with its `_ptsz`/`_ptds` aliases, in
//! its file's `hooks!` table.
//!
//! A new file of driver hooks: `mod name;` below, `use super::*;` and a `hooks! { real; ... }`
//! table in it, and its `table()` in [`table`]. A new wrapped library other than libcuda (as
//! `nvrtc`, `nvjitlink`): its wrappers exported under the library's names, a
//! `library::Library` static over them, its real functions declared once with
//! `library::exports!` (reached only through those), and the static in
//! `library::dlsym_answer`'s list.

use crate::allocator::{FreeCall, FreeError, HostStack};
use crate::copies::{box_span, CopyDescriptor, Memcpy2D, Memcpy3D};
use crate::driver::{CuResult, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use crate::hook_abi::{CStrIn, In, ModuleImage, OptionArrays, Out};
use crate::modules;
use crate::report::Report;
use crate::side_table::ForeignKind;
use crate::state::state;
use cudarc::driver::sys::{
    CUcontext, CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphEdgeData, CUgraphNode, CUkernel, CUlaunchConfig, CUlibrary, CUlinkState, CUmemcpyAttributes, CUmemoryPool, CUmodule, CUstream,
};
use gasan_uvm::{Memory, Stream};
use std::ffi::{c_char, c_void};

type Dptr = CUdeviceptr;

/// Sticky errors after which the context is dead: a `trap` (launch failed) or an MMU fault
/// (illegal address), etc.
fn is_sticky(r: CuResult) -> bool {
    use cudarc::driver::sys::CUresult as E;
    const STICKY: [CuResult; 7] = [
        E::CUDA_ERROR_ILLEGAL_ADDRESS as CuResult,
        E::CUDA_ERROR_HARDWARE_STACK_ERROR as CuResult,
        E::CUDA_ERROR_ILLEGAL_INSTRUCTION as CuResult,
        E::CUDA_ERROR_MISALIGNED_ADDRESS as CuResult,
        E::CUDA_ERROR_INVALID_ADDRESS_SPACE as CuResult,
        E::CUDA_ERROR_INVALID_PC as CuResult,
        E::CUDA_ERROR_LAUNCH_FAILED as CuResult,
    ];
    STICKY.contains(&r)
}

fn guard(name: &'static str, f: impl FnOnce() -> CuResult) -> CuResult {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        eprintln!("==gasan== internal error in {name}");
        crate::driver::CUDA_ERROR_UNKNOWN
    });
    if is_sticky(r) {
        let s = state();
        s.errors.on_device_error(&s.ring_sources(), r, name);
    }
    r
}

// Hook parameters carry the driver's own types (cudarc's `driver::sys`: handles, launch
// configurations, copy attributes); enum-valued ones (JIT options, pointer attributes, memory
// types) stay integers, because a value the Rust enum does not list, from a newer driver or a
// program, would be undefined behaviour as that enum. Arguments are converted at the boundary by
// their types: out-pointers are `Out<T>`, C strings `CStrIn`, descriptors the hook reads `In<T>`
// (crate::hook_abi: each passes as the pointer it wraps, and gives the body safe access), handles
// become newtypes (`arg_bounds::Owner`, `link::Link`) where they are recorded. Each hook's
// parameters are checked at compile time against cudarc's prototype of the driver function of its
// name ([`crate::hook_abi`]).
//
// `name | name_ptsz | name_ptds (args) { body }` declares one hook exported under each of the
// names: the per-thread-default-stream variants share the base's prototype and body, and `real`
// in each calls the driver's function of that export's own name. `#[legacy]` marks an export
// that cuda.h 13.0 no longer declares (see hook_abi::same_parameters!).
macro_rules! hooks {
    ($real:ident; $( $(#[$legacy:ident])? $name:ident $(| $alias:ident)* ( $($arg:ident : $t:ty),* ) $body:block )*) => {
        $(
            hook!($real; $name ($($arg: $t),*) $body);
            each_alias!($real; ($($arg: $t),*) $body; $($alias)*);
            crate::hook_abi::same_parameters!($($legacy)? $name ($($arg: $t),*));
        )*
        /// Every hook: (exact driver symbol, our wrapper).
        pub fn table() -> Vec<(&'static str, usize)> {
            vec![$((stringify!($name), $name as *const () as usize), $((stringify!($alias), $alias as *const () as usize),)*)*]
        }
    };
}

/// One alias at a time (the aliases repeat, the prototype and body do not).
macro_rules! each_alias {
    ($real:ident; $args:tt $body:block;) => {};
    ($real:ident; $args:tt $body:block; $first:ident $($rest:ident)*) => {
        hook!($real; $first $args $body);
        each_alias!($real; $args $body; $($rest)*);
    };
}

/// One exported hook: `real` calls the driver's function of the same exact name.
macro_rules! hook {
    ($real:ident; $name:ident ( $($arg:ident : $t:ty),* ) $body:block) => {
        /// # Safety
        /// Called by the program with the contract of the driver function of the same name.
        #[unsafe(no_mangle)]
        #[allow(non_snake_case, unused_variables)]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> CuResult {
            // SAFETY: the hook's signature is the driver function's of the same name (checked
            // against cudarc's prototype by hook_abi::same_parameters!).
            static REAL: crate::driver::Entry<unsafe extern "C" fn($($t),*) -> CuResult> = unsafe { crate::driver::Entry::new(stringify!($name)) };
            static TIMES: crate::call_times::CallTimes = crate::call_times::CallTimes::new(stringify!($name), crate::call_times::Kind::Program);
            #[allow(unused)]
            let $real = |$($arg: $t),*| -> CuResult {
                let Some(f) = REAL.get() else {
                    return crate::driver::CUDA_ERROR_UNKNOWN;
                };
                let counting = crate::call_times::enabled().then(std::time::Instant::now);
                // SAFETY: `f` is the driver's function of this hook's exact name. Each hook
                // calls `real` with its own arguments, which the program passed under that
                // function's contract (the hook's `# Safety`), except where a hook substitutes
                // checked code for the program's image or link input: that is an image of a
                // kind the function accepts (a link input's type set to match), alive for the
                // call and after it (leaked once loaded; a link's checked PTX is kept until
                // cuLinkDestroy).
                let r = unsafe { f($($arg),*) };
                if let Some(t) = counting {
                    TIMES.add_driver(t.elapsed());
                }
                r
            };
            crate::call_times::timed(&TIMES, || guard(stringify!($name), move || $body))
        }
    };
}

fn after_sync(r: CuResult) -> CuResult {
    if r == CUDA_SUCCESS {
        let s = state();
        s.errors.check_after_sync(&s.ring_sources());
    }
    r
}

const INVALID: CuResult = crate::driver::CUDA_ERROR_INVALID_VALUE;

mod copies;
mod launches;
pub(crate) mod library;
mod loading;
mod memory;
pub mod nccl;
mod nvjitlink;
mod nvrtc;
mod streams;
mod tensor_map;

pub(crate) use loading::take_cudart_loaders;

/// Every hook: (exact driver symbol, our wrapper).
pub fn table() -> Vec<(&'static str, usize)> {
    [memory::table(), copies::table(), streams::table(), launches::table(), loading::table(), tensor_map::table()].concat()
}
