//! The application's own `cuLink*` links: PTX and fatbin inputs are replaced by their checked PTX,
//! each input keeping its own control block and slow path (renamed `__gasan_ctl_l<n>`,
//! `__gasan_report_l<n>`, so several checked inputs link together and their reports point at the
//! right site table). When the linked cubin is loaded, every input's control block is written.

use crate::device::{compute_capability, current_device};
use crate::modules::{check_ptx, image_ptx_within, note_skip, LinkInput, Skip};
use crate::state::{log, state};
use gasan_jit::rename_for_link;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::Mutex;

/// `CUjitInputType` values that carry PTX gasan can check (as the driver API takes them: an int).
pub const CU_JIT_INPUT_PTX: i32 = cudarc::driver::sys::CUjitInputType::CU_JIT_INPUT_PTX as i32;
pub const CU_JIT_INPUT_FATBINARY: i32 = cudarc::driver::sys::CUjitInputType::CU_JIT_INPUT_FATBINARY as i32;

#[cfg(test)]
mod input_type_tests {
    /// cuda.h: `CU_JIT_INPUT_PTX = 1`, `CU_JIT_INPUT_FATBINARY = 2` (4 is `CU_JIT_INPUT_LIBRARY`,
    /// which an earlier hand-written constant took for fatbins, so fatbin link inputs went unchecked).
    #[test]
    fn checked_link_input_types_are_cuda_h_s() {
        assert_eq!((super::CU_JIT_INPUT_PTX, super::CU_JIT_INPUT_FATBINARY), (1, 2));
    }
}

#[derive(Default)]
struct LinkState {
    inputs: Vec<LinkInput>,
    /// Checked PTX handed to the linker (it may read it until cuLinkComplete).
    keep: Vec<CString>,
}

/// A link of the application's (`CUlinkState`), converted from the driver's handle at the hook
/// boundary; only compared and hashed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Link(usize);

impl From<cudarc::driver::sys::CUlinkState> for Link {
    fn from(h: cudarc::driver::sys::CUlinkState) -> Self {
        Link(h as usize)
    }
}

static LINKS: Mutex<Option<HashMap<Link, LinkState>>> = Mutex::new(None);

pub fn on_create(link: Link) {
    LINKS.lock().unwrap().get_or_insert_with(HashMap::new).insert(link, LinkState::default());
}

/// The checked replacement (PTX text with its NUL, and its length) for one input, or `None` to
/// pass the input through unchanged (not PTX / fatbin, instrumentation off, no PTX for this GPU,
/// or an error, which is logged). `data`: the input's bytes (`None`: a null pointer).
pub fn checked_input(link: Link, jit_type: i32, data: Option<&[u8]>) -> Option<(*const c_void, usize)> {
    let s = state();
    let data = data?;
    if !crate::modules::options().instrument || !(jit_type == CU_JIT_INPUT_PTX || jit_type == CU_JIT_INPUT_FATBINARY) {
        return None;
    }
    let mut guard = LINKS.lock().unwrap();
    let st = guard.get_or_insert_with(HashMap::new).entry(link).or_default();
    // PTX may come without its NUL: give image_ptx a terminated copy.
    let mut bytes = data.to_vec();
    if jit_type == CU_JIT_INPUT_PTX {
        bytes.push(0);
    }
    let cc = compute_capability(current_device().unwrap_or(0)).unwrap_or(0);
    // SAFETY: `bytes` is our own copy of the input, `bytes.len()` readable bytes: PTX now
    // NUL-terminated, or a fatbin, whose header's length is checked against them.
    let ptx = match unsafe { image_ptx_within(bytes.as_ptr().cast(), cc, Some(bytes.len())) } {
        Ok(p) => p,
        Err(skip) => {
            note_skip(&skip);
            return None;
        }
    };
    let (checked, sites, _) = match check_ptx(&ptx) {
        Ok(c) => c,
        Err(e) => {
            note_skip(&Skip::Error(e));
            return None;
        }
    };
    let (renamed, ctl_symbol) = rename_for_link(&checked, st.inputs.len());
    let module_id = s.sites.register(crate::report::ModuleSites::parsed(sites));
    st.inputs.push(LinkInput { module_id, ctl_symbol });
    let c = CString::new(renamed).ok()?;
    let r = (c.as_ptr() as *const c_void, c.as_bytes_with_nul().len());
    st.keep.push(c);
    s.counters.link_inputs_checked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    log(1, || format!("cuLink input {} checked (module {module_id})", st.inputs.len() - 1));
    Some(r)
}

pub fn on_complete(link: Link, cubin: *const c_void) {
    let inputs = LINKS.lock().unwrap().as_ref().and_then(|m| m.get(&link)).map(|st| st.inputs.clone()).unwrap_or_default();
    if !inputs.is_empty() && !cubin.is_null() {
        crate::modules::register_linked(cubin, link.0, inputs);
    }
}

pub fn on_destroy(link: Link) {
    if let Some(m) = LINKS.lock().unwrap().as_mut() {
        m.remove(&link);
    }
    crate::modules::forget_linked(link.0);
}
