//! A checked kernel's blocks per SM against its native twin's (jit/FORMS.md, item 10).
//!
//! Checks hold registers of their own, and where ptxas gives a checked kernel enough more
//! registers to cross an occupancy step (Triton's attention forward: 123 native, 168 checked; 4
//! blocks of 128 threads an SM natively, 3 checked), a quarter of the SM's warps go, which no
//! check's instructions cost. The front end assembles the original PTX beside the checked copy,
//! reads both cubins' register counts ([`resources_of`]), and where the checked kernel would fit
//! fewer blocks on an SM ([`blocks_to_keep`]) compiles it again with `.minnctapersm` set to the
//! native count (`gasan_instrument::ptx::with_min_blocks`), so ptxas fits its registers to it.
//! It keeps that compile where the kernel's frame grew by [`FRAME_BUDGET`] bytes at most (ptxas
//! spills what no longer fits, and a large spill in a loop costs more than the blocks gain).
//!
//! Only registers are compared: a kernel's shared memory is the same checked and native (gasan
//! adds none), so where shared memory limits the native kernel it limits the checked one alike.

use object::{Object, ObjectSection, ObjectSymbol, SymbolIndex};

/// What bounds the blocks of an SM, per compute capability (CUDA C++ Programming Guide, "Compute
/// Capabilities", technical specifications): the registers, the resident warps and blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sm {
    /// 32-bit registers of one SM.
    pub registers: u32,
    pub max_warps: u32,
    pub max_blocks: u32,
}

/// Registers are allocated to a warp in units of this many.
pub const REGISTER_UNIT: u32 = 256;

impl Sm {
    /// The SM of a ptxas `--gpu-name` / `-arch` value (`sm_90a`, `sm_80`, `compute_90`); `None`
    /// for an architecture this table does not know.
    pub fn of(gpu_name: &str) -> Option<Sm> {
        let digits: String = gpu_name.strip_prefix("sm_").or_else(|| gpu_name.strip_prefix("compute_"))?.chars().take_while(char::is_ascii_digit).collect();
        let (max_warps, max_blocks) = match digits.parse::<u32>().ok()? {
            70 | 72 => (64, 32),
            75 => (32, 16),
            80 | 90 | 100 | 103 => (64, 32),
            86 | 87 => (48, 16),
            89 => (48, 24),
            120 | 121 => (48, 32),
            _ => return None,
        };
        Some(Sm { registers: 65536, max_warps, max_blocks })
    }

    /// Blocks of `threads` threads using `registers` registers a thread that one SM holds at
    /// once, as far as registers, warps and blocks decide it.
    pub fn blocks(&self, threads: u32, registers: u32) -> u32 {
        let warps = threads.div_ceil(32).max(1);
        let by_warps = self.max_warps / warps;
        let per_warp = (registers * 32).div_ceil(REGISTER_UNIT) * REGISTER_UNIT;
        let by_registers = self.registers.checked_div(per_warp).map_or(u32::MAX, |w| w / warps);
        by_warps.min(by_registers).min(self.max_blocks)
    }
}

/// The blocks per SM to ask of ptxas for a checked kernel (`.minnctapersm`): its native twin's,
/// where the checked registers would give fewer; `None` where they give as many.
pub fn blocks_to_keep(sm: &Sm, threads: u32, native_registers: u32, checked_registers: u32) -> Option<u32> {
    let native = sm.blocks(threads, native_registers);
    (native > 0 && sm.blocks(threads, checked_registers) < native).then_some(native)
}

/// `EIATTR_REGCOUNT` in a cubin's `.nv.info`: (symbol index, registers), each a `u32`.
const EIATTR_REGCOUNT: u8 = 0x2f;
/// `EIATTR_FRAME_SIZE`: (symbol index, bytes of the function's local-memory frame).
const EIATTR_FRAME_SIZE: u8 = 0x11;
/// The format of a record with a size and a value of that many bytes (the others have 2 bytes).
const EIFMT_SVAL: u8 = 4;

/// What ptxas gave a function of a cubin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub registers: u32,
    /// Bytes of local memory a thread's frame takes: the function's own local arrays and the
    /// registers ptxas spilled.
    pub frame: u32,
}

/// The most bytes of frame a kept occupancy may add to a kernel (its spilled registers): the
/// attention forward's 56 (123 registers native, 168 checked, 128 at four blocks an SM), not
/// layernorm's 240 (40 native, 86 checked; 40 at twelve blocks spill 452 bytes of stores in
/// its loops).
pub const FRAME_BUDGET: u32 = 64;

/// Each function's registers and frame in a cubin, from its `.nv.info` section's
/// `EIATTR_REGCOUNT` and `EIATTR_FRAME_SIZE` records; an error where the ELF or a record does
/// not read.
pub fn resources_of(cubin: &[u8]) -> Result<Vec<(String, Resources)>, String> {
    let file = object::File::parse(cubin).map_err(|e| format!("not an ELF file: {e}"))?;
    let section = file.section_by_name(".nv.info").ok_or("no .nv.info section")?;
    let info = section.data().map_err(|e| format!(".nv.info: {e}"))?;
    let mut out = Vec::new();
    let mut at = 0;
    // Records: format, attribute, then two bytes that are the value's size where the format is
    // EIFMT_SVAL (the value follows) and the value itself otherwise.
    while at + 4 <= info.len() {
        let (format, attribute) = (info[at], info[at + 1]);
        let size = if format == EIFMT_SVAL { usize::from(u16::from_le_bytes([info[at + 2], info[at + 3]])) } else { 0 };
        let value = info.get(at + 4..at + 4 + size).ok_or_else(|| format!(".nv.info: a record at {at} runs past the section's end"))?;
        if format == EIFMT_SVAL && matches!(attribute, EIATTR_REGCOUNT | EIATTR_FRAME_SIZE) {
            let [s0, s1, s2, s3, r0, r1, r2, r3] = *value else { return Err(format!(".nv.info: attribute {attribute:#x} of {size} bytes at {at}")) };
            let index = u32::from_le_bytes([s0, s1, s2, s3]) as usize;
            let symbol = file.symbol_by_index(SymbolIndex(index)).map_err(|e| format!(".nv.info: attribute {attribute:#x} of symbol {index}: {e}"))?;
            let name = symbol.name().map_err(|e| e.to_string())?;
            let k = match out.iter().position(|(n, _): &(String, Resources)| n == name) {
                Some(k) => k,
                None => {
                    out.push((name.to_string(), Resources::default()));
                    out.len() - 1
                }
            };
            let v = u32::from_le_bytes([r0, r1, r2, r3]);
            if attribute == EIATTR_REGCOUNT {
                out[k].1.registers = v;
            } else {
                out[k].1.frame = v;
            }
        }
        at += 4 + size;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_attention_forwards_step() {
        let h100 = Sm::of("sm_90a").unwrap();
        assert_eq!((h100.blocks(128, 123), h100.blocks(128, 168), h100.blocks(128, 128)), (4, 3, 4));
        assert_eq!(blocks_to_keep(&h100, 128, 123, 168), Some(4));
        assert_eq!(blocks_to_keep(&h100, 128, 123, 128), None, "the same step");
        // Warps, not registers, bound small kernels: 16 blocks of 4 warps at 32 or 40 registers.
        assert_eq!((h100.blocks(128, 32), h100.blocks(128, 24)), (16, 16));
        assert_eq!(blocks_to_keep(&h100, 128, 24, 32), None);
        assert_eq!(Sm::of("compute_80"), Some(Sm { registers: 65536, max_warps: 64, max_blocks: 32 }));
        assert_eq!(Sm::of("sm_86").unwrap().blocks(256, 32), 6);
        assert!(Sm::of("sm_61").is_none() && Sm::of("gfx90a").is_none() && Sm::of("sm_").is_none());
    }

    proptest! {
        /// The count asked for is the native one and more than the checked registers give, and
        /// ptxas can meet it: some register count no smaller than a thread's least gives it.
        #[test]
        fn asking_keeps_the_native_step(threads in 1u32..=1024, native in 1u32..=255, extra in 0u32..=128) {
            let sm = Sm::of("sm_90a").unwrap();
            let checked = (native + extra).min(255);
            prop_assert!(sm.blocks(threads, checked) <= sm.blocks(threads, native), "more registers never fit more blocks");
            match blocks_to_keep(&sm, threads, native, checked) {
                Some(n) => {
                    prop_assert_eq!(n, sm.blocks(threads, native));
                    prop_assert!(sm.blocks(threads, checked) < n);
                    prop_assert!(sm.blocks(threads, native) >= n);
                }
                None => prop_assert!(sm.blocks(threads, checked) >= sm.blocks(threads, native) || sm.blocks(threads, native) == 0),
            }
        }
    }

    #[test]
    fn a_cubin_that_does_not_read_is_an_error() {
        assert!(resources_of(b"not an elf").is_err());
    }
}
