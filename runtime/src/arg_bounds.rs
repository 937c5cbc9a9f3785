//! Bounds carried in launch arguments (gasan_instrument::abi::param_tag): at a launch of a
//! checked kernel, each pointer argument the instrumenter listed for it is passed with how far
//! its live pool block's whole granules reach above it, in the pointer's top bits (all listed
//! arguments or none). The kernel decodes that at its entry instead of loading the block's extent
//! entry, and hands the program the pointer without it.
//!
//! Which kernel a launch names is known from the handles the program got for it: a module's or
//! library's function or kernel handle is recorded when `cuModuleGetFunction`,
//! `cuLibraryGetKernel` or `cuKernelGetFunction` hands it out for a checked module. A handle
//! gasan did not see handed out is launched as it is (its kernel looks its blocks up), so this
//! can only cost speed, never a check — and an unchecked kernel, which would not strip them, is
//! never given tagged arguments. Handles may be reused once their module is gone, so an unload
//! forgets every function handle, and a context's teardown every handle bound to a context
//! (modules and their functions; libraries and their kernels outlive contexts).
//!
//! Launches captured into a graph are not tagged: a graph may be replayed after a buffer it
//! names was freed, and the bounds must not outlive the launch they were read for.

use cudarc::driver::sys::{CUfunction, CUkernel, CUlibrary, CUmodule};
use gasan_instrument::abi::{param_tag, KernelParamTags, ParamTagTable};
use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, LazyLock, RwLock};

/// A loaded module or library (`CUmodule` / `CUlibrary`): what kernels' tags are recorded under.
/// Converted from the driver's handle at the hook boundary; only compared and hashed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner(usize);

/// A handle a launch names: a `CUfunction`, or a library's `CUkernel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Callable(usize);

impl From<CUmodule> for Owner {
    fn from(h: CUmodule) -> Self {
        Owner(h as usize)
    }
}
impl From<CUlibrary> for Owner {
    fn from(h: CUlibrary) -> Self {
        Owner(h as usize)
    }
}
impl From<CUfunction> for Callable {
    fn from(h: CUfunction) -> Self {
        Callable(h as usize)
    }
}
impl From<CUkernel> for Callable {
    fn from(h: CUkernel) -> Self {
        Callable(h as usize)
    }
}

/// Kernels with more parameters than this are launched untagged (the copied argument array
/// lives on the stack).
const MAX_ARGS: usize = 64;

/// A recorded handle's value, and whether the handle belongs to a context (a module or its
/// function, which a context's teardown ends) rather than to a library.
type Entry<T> = (Arc<T>, bool);

#[derive(Default)]
struct Registry {
    /// Checked modules and libraries (`CUmodule` / `CUlibrary` handles) → their kernels' tags.
    owners: HashMap<Owner, Entry<ParamTagTable>>,
    /// `CUfunction` / `CUkernel` handles of checked kernels with taggable parameters.
    functions: HashMap<Callable, Entry<KernelParamTags>>,
}

static REGISTRY: LazyLock<RwLock<Registry>> = LazyLock::new(Default::default);
/// Stream captures begun and not yet ended, process-wide: while any runs, nothing is tagged.
static CAPTURES: AtomicI64 = AtomicI64::new(0);

fn registry_mut() -> std::sync::RwLockWriteGuard<'static, Registry> {
    REGISTRY.write().unwrap_or_else(|e| e.into_inner())
}

/// A checked module (`in_context`) or library was loaded as `owner` with these tags.
pub fn on_loaded(owner: Owner, in_context: bool, tags: &Arc<ParamTagTable>) {
    let mut r = registry_mut();
    if tags.kernels.is_empty() {
        r.owners.remove(&owner);
    } else {
        r.owners.insert(owner, (Arc::clone(tags), in_context));
    }
}

/// `handle` was handed out for kernel `name` of `owner` (a function of a module, a kernel of a
/// library).
pub fn on_function(owner: Owner, name: &CStr, handle: Callable) {
    let mut r = registry_mut();
    let tags = r.owners.get(&owner).and_then(|(t, in_context)| Some((t.kernels.get(name.to_str().ok()?)?.clone(), *in_context)));
    match tags {
        Some((k, in_context)) => r.functions.insert(handle, (Arc::new(k), in_context)),
        // A handle value reused by an unchecked kernel must not keep a checked one's tags.
        None => r.functions.remove(&handle),
    };
}

/// `function` is library kernel `kernel`'s function in the current context (`cuKernelGetFunction`).
pub fn on_kernel_function(kernel: Callable, function: Callable) {
    let mut r = registry_mut();
    match r.functions.get(&kernel).cloned() {
        Some((k, _)) => r.functions.insert(function, (k, true)),
        None => r.functions.remove(&function),
    };
}

/// `module` is library `library`'s module in the current context (`cuLibraryGetModule`), whose
/// `cuModuleGetFunction` handles are then recorded like the library's own.
pub fn on_library_module(library: Owner, module: Owner) {
    let mut r = registry_mut();
    match r.owners.get(&library).cloned() {
        Some((t, _)) => r.owners.insert(module, (t, true)),
        None => r.owners.remove(&module),
    };
}

/// A module or library was unloaded (`Some`): every function handle is forgotten. A context was
/// torn down (`None`): every handle bound to a context is.
pub fn on_unload(owner: Option<Owner>) {
    let mut r = registry_mut();
    match owner {
        Some(o) => {
            r.owners.remove(&o);
            r.functions.clear();
        }
        None => {
            r.owners.retain(|_, (_, in_context)| !*in_context);
            r.functions.retain(|_, (_, in_context)| !*in_context);
        }
    }
}

/// A stream capture began (`true`) or ended.
pub fn on_capture(began: bool) {
    CAPTURES.fetch_add(if began { 1 } else { -1 }, Ordering::AcqRel);
}

/// Launches `f` through `go` with its argument array: a copy with the listed arguments tagged,
/// or the program's own `params` when nothing is to be tagged. `go` gets the array and whether it
/// is the tagged copy. The copy lives on this stack frame for the call (the driver copies the
/// values at the launch): a launch allocates nothing.
///
/// # Safety
/// `params` is null or the launch's argument array: one readable pointer per parameter of the
/// kernel `f` names, each to that argument's value.
pub unsafe fn with_bounds<R>(f: Callable, params: *mut *mut c_void, lookup: impl Fn(u64) -> Option<(u64, u64)>, go: impl FnOnce(*mut *mut c_void, bool) -> R) -> R {
    if params.is_null() || CAPTURES.load(Ordering::Acquire) > 0 {
        return go(params, false);
    }
    let Some(k) = REGISTRY.read().unwrap_or_else(|e| e.into_inner()).functions.get(&f).map(|(k, _)| Arc::clone(k)) else {
        return go(params, false);
    };
    let count = k.count as usize;
    if count > MAX_ARGS {
        return go(params, false);
    }
    // SAFETY: `params` holds `count` pointers (this function's contract; `count` is the kernel's
    // declared parameter count, ParamTagTable's invariant keeps every ordinal below it).
    let program = unsafe { std::slice::from_raw_parts(params, count) };
    let mut values = [0u64; MAX_ARGS];
    // All listed arguments or none (the kernel tests the first one's mark only): one that cannot
    // carry its block's bounds sends the whole launch to the kernel's lookups.
    for &o in &k.tagged {
        let o = o as usize;
        if program[o].is_null() {
            return go(params, false);
        }
        // SAFETY: argument `o` is a 64-bit scalar (the instrumenter lists only `.u64`/`.s64`/
        // `.b64` parameters), and the driver reads 8 bytes from the program's pointer to it; it
        // may be unaligned (a packed argument buffer), hence read_unaligned.
        let v = unsafe { program[o].cast::<u64>().read_unaligned() };
        let tagged = match lookup(v) {
            // Inside a live block: its reach, cut to what a tag carries (beyond it, accesses get
            // the ordinary check; an untagged launch would give every access of the kernel that).
            Some((lo, hi)) if lo <= v => param_tag::encode(v, hi.max(v).min(v.saturating_add(param_tag::MAX_REACH))),
            // Null, freed, outside the pool: no reach, so its accesses get the ordinary check.
            _ => param_tag::encode(v, v),
        };
        let Some(t) = tagged else { return go(params, false) };
        values[o] = t;
    }
    let mut pointers = [std::ptr::null_mut(); MAX_ARGS];
    pointers[..count].copy_from_slice(program);
    for &o in &k.tagged {
        pointers[o as usize] = (&raw mut values[o as usize]).cast();
    }
    go(pointers.as_mut_ptr(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values a launch of `f` would pass (`None`: the program's array, untagged).
    ///
    /// # Safety
    /// As for [`with_bounds`].
    unsafe fn tag(f: Callable, params: *mut *mut c_void, lookup: impl Fn(u64) -> Option<(u64, u64)>) -> Option<Vec<u64>> {
        // SAFETY: this function's contract; the tagged array `go` gets holds one valid pointer to
        // a u64 per argument, then nulls (the test kernels have at most three).
        unsafe { with_bounds(f, params, lookup, |arr, tagged| tagged.then(|| (0..3).map_while(|i| Some(*arr.add(i)).filter(|p| !p.is_null()).map(|p| p.cast::<u64>().read())).collect())) }
    }

    fn table(kernel: &str, count: u32, tagged: Vec<u32>) -> Arc<ParamTagTable> {
        Arc::new(ParamTagTable { kernels: [(kernel.to_string(), KernelParamTags { count, tagged })].into_iter().collect() })
    }

    /// One test, since the registry is process-wide: handles of checked kernels get their
    /// arguments tagged, others and captured launches do not, and unloads forget handles.
    #[test]
    fn launches_of_recorded_checked_kernels_get_their_pointer_arguments_tagged() {
        let owner = |h: usize| Owner::from(h as CUmodule);
        let callable = |h: usize| Callable::from(h as CUfunction);
        let (module, library, f, k, kf) = (owner(0x1000), owner(0x2000), callable(0x1100), callable(0x2100), callable(0x2200));
        on_loaded(module, true, &table("kern", 3, vec![0, 2]));
        on_loaded(library, false, &table("lib_kern", 1, vec![0]));
        on_function(module, c"kern", f);
        on_function(module, c"other", callable(0x1200));
        on_function(library, c"lib_kern", k);
        on_kernel_function(k, kf);

        let block = (0x7f00_0000_0000u64, 0x7f00_0010_0000u64);
        let lookup = |v: u64| (block.0..block.1).contains(&v).then_some(block);
        let (mut a, mut n, mut c) = (block.0 + 64, 7u64, 0x1234u64);
        let mut params = [(&raw mut a).cast::<c_void>(), (&raw mut n).cast(), (&raw mut c).cast()];
        // SAFETY: `params` holds the three arguments of "kern".
        let args = unsafe { tag(f, params.as_mut_ptr(), lookup) }.expect("tagged");
        let read = |i: usize| args[i];
        let (p, hi) = param_tag::decode(read(0)).expect("argument 0 carries bounds");
        assert_eq!(p, a);
        assert!(a < hi && hi <= block.1 && block.1 - hi < param_tag::REACH_UNIT);
        assert_eq!(read(1), 7, "an unlisted argument passes as it is");
        assert_eq!(param_tag::decode(read(2)), Some((0x1234, 0x1234)), "a listed argument outside the pool reaches nothing");
        assert_eq!((a, n, c), (block.0 + 64, 7, 0x1234), "the program's values are not touched");
        // All or none: a listed value that cannot be tagged (not a pointer below 2^48) leaves the
        // whole launch untagged.
        // SAFETY: params[2] points to `c`, a live u64 (written through the array, as the
        // driver would read it).
        unsafe { params[2].cast::<u64>().write(u64::MAX - 7) };
        // SAFETY: as above.
        assert!(unsafe { tag(f, params.as_mut_ptr(), lookup) }.is_none());
        // SAFETY: as above.
        unsafe { params[2].cast::<u64>().write(0x1234) };
        // A block reaching further than a tag carries: tagged with the most it carries.
        let huge = |v: u64| Some((v, v + param_tag::MAX_REACH + param_tag::REACH_UNIT));
        // SAFETY: as above.
        let args = unsafe { tag(f, params.as_mut_ptr(), huge) }.expect("tagged");
        assert_eq!(param_tag::decode(args[0]), Some((a, a + param_tag::MAX_REACH)));
        // (One argument for the library's kernel, through both of its handles.)
        for h in [k, kf] {
            // SAFETY: as above.
            assert!(unsafe { tag(h, params.as_mut_ptr(), lookup) }.is_some());
        }
        // Unrecorded handles, a kernel without tags, a capture in progress: untagged.
        for h in [callable(0x1200), callable(0x9999)] {
            // SAFETY: as above.
            assert!(unsafe { tag(h, params.as_mut_ptr(), lookup) }.is_none());
        }
        on_capture(true);
        // SAFETY: as above.
        assert!(unsafe { tag(f, params.as_mut_ptr(), lookup) }.is_none());
        on_capture(false);
        // SAFETY: as above.
        assert!(unsafe { tag(f, params.as_mut_ptr(), lookup) }.is_some());
        // A context's teardown forgets its module's function and the kernel's function in it,
        // not the library's kernel.
        on_unload(None);
        for (h, kept) in [(f, false), (kf, false), (k, true)] {
            // SAFETY: as above.
            assert_eq!(unsafe { tag(h, params.as_mut_ptr(), lookup) }.is_some(), kept);
        }
        on_loaded(module, true, &table("kern", 3, vec![0, 2]));
        on_function(module, c"kern", f);
        on_kernel_function(k, kf);
        // A handle reused for an unchecked kernel loses its tags; an unload forgets them all.
        on_function(owner(0x5000), c"kern", kf);
        // SAFETY: as above.
        assert!(unsafe { tag(kf, params.as_mut_ptr(), lookup) }.is_none());
        on_unload(Some(module));
        // SAFETY: as above.
        assert!(unsafe { tag(f, params.as_mut_ptr(), lookup) }.is_none());
        on_function(module, c"kern", f);
        // SAFETY: as above.
        assert!(unsafe { tag(f, params.as_mut_ptr(), lookup) }.is_none(), "the unloaded module's kernels are no longer known");
    }
}
