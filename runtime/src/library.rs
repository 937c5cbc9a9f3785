//! The one way the runtime reaches a library other than libcuda (whose entry points are
//! [`crate::driver`]'s): a [`Library`] over the names gasan wraps, each of the library's functions
//! gasan calls declared once with its C prototype ([`exports!`]) and found as the library itself
//! would answer it, never gasan's own export of the same name. NVRTC, nvJitLink and NCCL
//! ([`crate::hooks::library`]) and libc's `sigaction`/`signal` ([`crate::signals`]) are reached
//! so.

use std::ffi::{c_void, CStr, CString};
use std::marker::PhantomData;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// What [`Library::dlsym_answer`] returns for "answer null": address 1 (`c_void`'s alignment), which the
/// trampoline in [`crate::interpose`] turns into a null result; no symbol lives there.
pub(crate) const DLSYM_NULL: *mut c_void = std::ptr::dangling_mut::<c_void>();
const _: () = assert!(std::mem::align_of::<c_void>() == 1);

/// One wrapped library: its wrapped names, our wrappers, and the library's own functions once found.
pub(crate) struct Library {
    /// `(exact name, our wrapper's address)`, in the order the wrappers index them.
    table: fn() -> &'static [(&'static str, usize)],
    real: OnceLock<Vec<AtomicUsize>>,
    lib: AtomicUsize,
    /// The library's soname, for one loaded `RTLD_LOCAL` by another library (PyTorch loads NCCL so):
    /// neither `RTLD_NEXT` nor a program's `dlsym` then finds its functions.
    soname: Option<&'static CStr>,
    /// Each function only as `RTLD_NEXT` finds it, never from the library holding the others
    /// ([`Library::next_in_order`]).
    next_only: bool,
}

impl Library {
    pub(crate) const fn new(table: fn() -> &'static [(&'static str, usize)]) -> Library {
        Library { table, real: OnceLock::new(), lib: AtomicUsize::new(0), soname: None, next_only: false }
    }

    /// A library also found by its soname when it is loaded ([`Library::soname`]).
    pub(crate) const fn with_soname(table: fn() -> &'static [(&'static str, usize)], soname: &'static CStr) -> Library {
        Library { table, real: OnceLock::new(), lib: AtomicUsize::new(0), soname: Some(soname), next_only: false }
    }

    /// A library whose functions are each found as `RTLD_NEXT` from gasan finds them (libc's:
    /// another interposer of the same name loaded after gasan keeps its turn).
    pub(crate) const fn next_in_order(table: fn() -> &'static [(&'static str, usize)]) -> Library {
        Library { table, real: OnceLock::new(), lib: AtomicUsize::new(0), soname: None, next_only: true }
    }

    fn real_slots(&self) -> &[AtomicUsize] {
        self.real.get_or_init(|| (self.table)().iter().map(|_| AtomicUsize::new(0)).collect())
    }

    fn is_wrapper(&self, p: usize) -> bool {
        (self.table)().iter().any(|&(_, w)| w == p)
    }

    /// The library's function `name` as `RTLD_NEXT` from gasan sees it (linked or opened
    /// `RTLD_GLOBAL`), never gasan's own export.
    fn next_symbol(&self, name: &CStr) -> usize {
        let p = glibc_dlsym(libc::RTLD_NEXT, name);
        if self.is_wrapper(p) {
            0
        } else {
            p
        }
    }

    /// `dlsym(handle, name)` for a name of this library: our wrapper where the library answers the
    /// lookup, [`DLSYM_NULL`] where it would answer nothing, null for `RTLD_NEXT`; `None` when
    /// the name is not wrapped here.
    pub(crate) fn dlsym_answer(&self, handle: *mut c_void, name: &[u8]) -> Option<*mut c_void> {
        let i = (self.table)().iter().position(|(n, _)| n.as_bytes() == name)?;
        if handle == libc::RTLD_NEXT {
            return Some(std::ptr::null_mut());
        }
        let c = CString::new(name).ok()?;
        // A program's own handle names the library (or, for the global scope, finds gasan's exports
        // first: then the library is whatever comes after gasan).
        let found = if handle.is_null() { 0 } else { glibc_dlsym(handle, &c) };
        let real = if found == 0 || self.is_wrapper(found) { self.next_symbol(&c) } else { found };
        if real == 0 {
            // As without gasan: null, with dlerror's message from a lookup that fails the same way.
            glibc_dlsym(libc::RTLD_NEXT, &c);
            return Some(DLSYM_NULL);
        }
        let _ = self.real_slots()[i].compare_exchange(0, real, Ordering::AcqRel, Ordering::Acquire);
        Some((self.table)()[i].1 as *mut c_void)
    }

    /// The library's function `i` of the table: as a `dlsym` answered found it, else from the
    /// library that holds the functions found so far (or has the library's soname; not for
    /// [`Library::next_in_order`]), else as `RTLD_NEXT` finds it. Once found, kept.
    pub(crate) fn real(&self, i: usize) -> Option<usize> {
        let slot = &self.real_slots()[i];
        let mut p = slot.load(Ordering::Acquire);
        if p == 0 {
            let name = CString::new((self.table)()[i].0).expect("no NUL in a name");
            p = if self.next_only { 0 } else { self.library().map_or(0, |lib| glibc_dlsym(lib, &name)) };
            if p == 0 || self.is_wrapper(p) {
                p = self.next_symbol(&name);
            }
            if p == 0 {
                return None;
            }
            let _ = slot.compare_exchange(0, p, Ordering::AcqRel, Ordering::Acquire);
        }
        Some(p)
    }

    /// The library behind the functions found so far (a program that opens it `RTLD_LOCAL` looks
    /// up its names one by one, so the others come from it too), else the loaded library of its
    /// soname.
    fn library(&self) -> Option<*mut c_void> {
        let l = self.lib.load(Ordering::Acquire);
        if l != 0 {
            return Some(l as *mut c_void);
        }
        let Some(known) = self.real_slots().iter().map(|r| r.load(Ordering::Acquire)).find(|&p| p != 0) else {
            // SAFETY: RTLD_NOLOAD only looks the library up among those loaded (matching sonames)
            // and takes a reference to it, kept: the library stays as long as the program uses it.
            let lib = unsafe { libc::dlopen(self.soname?.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
            if lib.is_null() {
                return None;
            }
            self.lib.store(lib as usize, Ordering::Release);
            return Some(lib);
        };
        // SAFETY: dladdr reads the loader's tables for an address of a loaded library; `info` is
        // written by it before it is read, and only when it succeeds.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::dladdr(known as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: the library is loaded (it holds `known`), so RTLD_NOLOAD only takes a reference
        // to it; the reference is kept (the library stays as long as the program uses it anyway).
        let lib = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if lib.is_null() {
            return None;
        }
        self.lib.store(lib as usize, Ordering::Release);
        Some(lib)
    }

    /// The file of the library that holds function `anchor` (for cache keys).
    pub(crate) fn file(&self, anchor: usize) -> Option<std::path::PathBuf> {
        let p = self.real(anchor)?;
        // SAFETY: dladdr reads the loader's tables for an address of a loaded library; `info` is
        // written by it before it is read, and only when it succeeds.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::dladdr(p as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: dladdr's file name is a C string of the loader's, alive while the library is.
        let name = unsafe { CStr::from_ptr(info.dli_fname) };
        Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
    }

    /// A function of the library that is not wrapped, from the library that holds the wrapped ones
    /// (`anchor`: the index of one of them).
    pub(crate) fn sibling(&self, anchor: usize, name: &CStr) -> Option<usize> {
        self.real(anchor)?;
        let p = glibc_dlsym(self.library()?, name);
        (p != 0).then_some(p)
    }
}

/// One function of a wrapped [`Library`], of type `F` (its C prototype): the one way gasan reaches
/// it. A wrapped function through its slot of the library's table ([`Library::real`]), any other
/// from the library that holds the wrapped ones ([`Library::sibling`]). Declared with
/// [`exports!`], once per function.
pub(crate) struct Export<F> {
    library: &'static Library,
    name: &'static str,
    prototype: PhantomData<F>,
}

impl<F: Copy> Export<F> {
    /// # Safety
    /// `F` is an `unsafe extern "C" fn` type with the C prototype of `library`'s function `name`.
    pub(crate) const unsafe fn new(library: &'static Library, name: &'static str) -> Self {
        Export { library, name, prototype: PhantomData }
    }

    /// The function, `None` when the library (or this function of it) is not found. Not cached:
    /// a later `dlsym` of the program may find the library.
    pub(crate) fn get(&self) -> Option<F> {
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>(), "Export: F must be a function pointer") };
        let wrapped = (self.library.table)().iter().position(|&(n, _)| n == self.name);
        let p = match wrapped {
            Some(i) => self.library.real(i)?,
            None => self.library.sibling(0, &CString::new(self.name).ok()?)?,
        };
        // SAFETY: `p` is the non-null address of the library's function `self.name`, and `F` a
        // function pointer type (same size, checked above) with its prototype (`new`'s contract).
        Some(unsafe { std::mem::transmute_copy::<usize, F>(&p) })
    }

    /// The file of the library that holds this (wrapped) function, for cache keys.
    pub(crate) fn file(&self) -> Option<std::path::PathBuf> {
        self.library.file((self.library.table)().iter().position(|&(n, _)| n == self.name)?)
    }
}

/// Declares the functions of a wrapped library that gasan calls, once each, by exact name and C
/// prototype (the library's header, CUDA 13.0): `LIB -> Result; name(arg: Type, ...);` becomes the
/// [`Export`] `name` of `LIB` (a [`Library`] static in scope). The driver's are
/// [`crate::driver::sys`].
macro_rules! exports {
    ($library:ident -> $ret:ty; $($name:ident($($arg:ident: $t:ty),*);)*) => {
        $(
            #[allow(non_upper_case_globals)]
            // SAFETY: the type is the prototype of the library's function of this name, as its
            // header declares it.
            pub(crate) static $name: $crate::library::Export<unsafe extern "C" fn($($t),*) -> $ret> = unsafe { $crate::library::Export::new(&$library, stringify!($name)) };
        )*
    };
}
pub(crate) use exports;

/// glibc's `dlsym(handle, name)` (not ours).
pub(crate) fn glibc_dlsym(handle: *mut c_void, name: &CStr) -> usize {
    // SAFETY: glibc's dlsym with a handle the program (or RTLD_NEXT) gave and a C string.
    unsafe { crate::driver::real_dlsym()(handle, name.as_ptr()) as usize }
}
