//! Pool allocations shared between two real processes over the exporter's Unix socket (host
//! backend: memfd chunks passed with SCM_RIGHTS), checked against a model: an import succeeds
//! exactly while the export is offered, both processes see the same bytes, the importer learns the
//! allocation's bounds (its last byte passes the shadow check, the byte after fails), memory stays
//! alive for whoever still maps it, and a process killed while holding an import (either side)
//! leaves the other working.
//!
//! The other process is this test binary again, running only `importer_process` (a helper, not a
//! test: ignored in ordinary runs, started by [`Peer::spawn`]), driven by lines on its stdin.

use gasan_instrument::shadow::Scale;
use gasan_uvm::ipc::{self, Exporter, IpcHandle, IPC_HANDLE_SIZE};
use gasan_uvm::{HostBackend, Pool, PoolConfig, Stream, UvmError};
use proptest::prelude::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

const G: u64 = 64 << 10;
const SCALE: Scale = Scale::S8;
const PEER_ENV: &str = "GASAN_UVM_IPC_TEST_PEER";

fn pool() -> Pool {
    Pool::new(Box::new(HostBackend::new(G)), &PoolConfig { size: 1 << 30, shift: SCALE.shift(), hints: vec![], max_size: 0, tags: 1 }).unwrap()
}

/// One exporter per process (it listens on the process's socket name); tests share it.
fn exporter() -> &'static Exporter {
    static E: OnceLock<Exporter> = OnceLock::new();
    E.get_or_init(|| Exporter::start().unwrap())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> [u8; IPC_HANDLE_SIZE] {
    let mut b = [0u8; IPC_HANDLE_SIZE];
    for (i, o) in b.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
    b
}

/// The other process.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl Peer {
    fn spawn() -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "importer_process", "--ignored", "--nocapture", "--test-threads=1"])
            .env(PEER_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Peer { child, stdin, out }
    }

    /// Sends a command; returns the answer (what follows `@@ ` on its line: the first answer shares
    /// its line with libtest's `test importer_process ... `).
    fn ask(&mut self, line: &str) -> String {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let mut l = String::new();
            assert!(self.out.read_line(&mut l).unwrap() > 0, "peer ended before answering {line:?}");
            if let Some(i) = l.find("@@ ") {
                return l[i + 3..].trim().to_string();
            }
        }
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        let st = self.child.wait().unwrap();
        assert!(!st.success());
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Maps an import at `va` of `p`, with the allocation's shadow written from the handle's bounds;
/// returns (allocation start, last byte passes the check, byte after it fails).
fn map_import(p: &mut Pool, va: u64, h: &IpcHandle, fds: Vec<std::os::fd::OwnedFd>) -> Result<(u64, bool, bool), UvmError> {
    p.commit_imported(va, 1, fds)?;
    let start = va + h.offset;
    let size = SCALE.encodable_size(h.size);
    p.write_shadow(start, &SCALE.region_shadow(size, h.len() - h.offset), Stream::SYNC)?;
    let check = |p: &Pool, a: u64| {
        let mut s = [0u8];
        p.read_shadow(a & !(SCALE.granule() - 1), &mut s).unwrap();
        SCALE.is_bad(s[0], a, 1)
    };
    let last_ok = !check(p, start + h.size - 1);
    let past_bad = start + size >= va + h.len() || check(p, start + size);
    Ok((start, last_ok, past_bad))
}

/// Writes an answer line for [`Peer::ask`], flushed at once.
fn answer(line: &str) {
    let mut out = std::io::stdout().lock();
    out.write_all(format!("@@ {line}\n").as_bytes()).unwrap();
    out.flush().unwrap();
}

/// The other process's side: commands `import HEX BYTE` (map it, report its first and last bytes
/// and the bounds checks, then write BYTE at its start), `read N` (first byte of import N),
/// `hold HEX` (map it and wait to be killed), `export CHUNKS BYTE` (export an allocation of its
/// own whose first byte is BYTE, answer its handle).
#[test]
#[ignore = "the other process of these tests, started by Peer::spawn"]
fn importer_process() {
    if std::env::var_os(PEER_ENV).is_none() {
        return;
    }
    let mut p = pool();
    let mut next = p.base();
    let mut imports: Vec<u64> = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        match w[0] {
            "import" | "hold" => {
                let h = IpcHandle::from_bytes(&unhex(w[1])).unwrap();
                let r = ipc::import(&h).and_then(|fds| {
                    let va = next;
                    next += (u64::from(h.chunks) + 1) * G;
                    map_import(&mut p, va, &h, fds)
                });
                match r {
                    Err(e) => answer(&format!("err {e}")),
                    Ok(_) if w[0] == "hold" => {
                        answer("holding");
                        loop {
                            std::thread::sleep(std::time::Duration::from_secs(60));
                        }
                    }
                    Ok((start, last_ok, past_bad)) => {
                        let (mut first, mut last) = ([0u8], [0u8]);
                        p.backend().read(start, &mut first).unwrap();
                        p.backend().read(start + h.size - 1, &mut last).unwrap();
                        let byte: u8 = w[2].parse().unwrap();
                        p.backend().write(start, &[byte], Stream::SYNC).unwrap();
                        imports.push(start);
                        answer(&format!("ok {} {} {last_ok} {past_bad}", first[0], last[0]));
                    }
                }
            }
            "read" => {
                let mut b = [0u8];
                p.backend().read(imports[w[1].parse::<usize>().unwrap()], &mut b).unwrap();
                answer(&format!("byte {}", b[0]));
            }
            "export" => {
                let chunks: u64 = w[1].parse().unwrap();
                let va = next;
                next += (chunks + 1) * G;
                p.commit(va, chunks * G).unwrap();
                p.backend().write(va, &[w[2].parse().unwrap()], Stream::SYNC).unwrap();
                let fds = p.export(va, chunks * G).unwrap();
                let h = exporter().export(fds, 0, G, 0, chunks * G).unwrap();
                answer(&format!("handle {}", hex(&h.to_bytes())));
            }
            other => panic!("unknown command {other}"),
        }
    }
}

/// Tests that share the one exporter and spawn processes run one at a time (the parent pool's
/// mappings are the process's too).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn an_import_sees_the_bytes_and_the_bounds_and_outlives_the_export() {
    let _s = serial();
    let mut p = pool();
    let base = p.base();
    p.commit(base, 3 * G).unwrap();
    let (offset, size) = (512, 3 * G - 512 - 1000);
    p.backend().write(base + offset, &[0xa5], Stream::SYNC).unwrap();
    p.backend().write(base + offset + size - 1, &[0x5a], Stream::SYNC).unwrap();
    let fds = p.export(base, 3 * G).unwrap();
    let h = exporter().export(fds, 0, G, offset, size).unwrap();
    let mut peer = Peer::spawn();
    assert_eq!(peer.ask(&format!("import {} 7", hex(&h.to_bytes()))), "ok 165 90 true true");
    let mut b = [0u8];
    p.backend().read(base + offset, &mut b).unwrap();
    assert_eq!(b[0], 7, "the importer's write is the exporter's byte");
    // Freed here: withdrawn, then the VA retired and the chunks released.
    assert!(exporter().withdraw(&h));
    assert!(!exporter().withdraw(&h));
    p.retire(base, 3 * G).unwrap();
    let again = peer.ask(&format!("import {} 8", hex(&h.to_bytes())));
    assert!(again.starts_with("err bad gasan IPC handle"), "{again}");
    // The importer's mapping keeps the memory.
    assert_eq!(peer.ask("read 0"), "byte 7");
}

#[test]
fn a_process_killed_holding_an_import_leaves_the_exporter_serving() {
    let _s = serial();
    let mut p = pool();
    let base = p.base() + 16 * G;
    p.commit(base, G).unwrap();
    p.backend().write(base, &[42], Stream::SYNC).unwrap();
    let h = exporter().export(p.export(base, G).unwrap(), 0, G, 0, 100).unwrap();
    let holder = Peer::spawn();
    let mut holder = holder;
    assert_eq!(holder.ask(&format!("hold {}", hex(&h.to_bytes()))), "holding");
    holder.kill();
    let mut peer = Peer::spawn();
    assert_eq!(peer.ask(&format!("import {} 9", hex(&h.to_bytes()))), "ok 42 0 true true");
    let mut b = [0u8];
    p.backend().read(base, &mut b).unwrap();
    assert_eq!(b[0], 9);
    assert!(exporter().withdraw(&h));
}

#[test]
fn an_exporter_killed_while_its_allocation_is_imported_leaves_the_importer_its_bytes() {
    let _s = serial();
    let mut exporter_process = Peer::spawn();
    let answer = exporter_process.ask("export 2 77");
    let h = IpcHandle::from_bytes(&unhex(answer.strip_prefix("handle ").unwrap())).unwrap();
    assert_eq!((h.chunks, h.pid == std::process::id()), (2, false));
    let mut p = pool();
    let va = p.base() + 64 * G;
    let fds = ipc::import(&h).unwrap();
    let (start, last_ok, past_bad) = map_import(&mut p, va, &h, fds).unwrap();
    assert_eq!((start, last_ok, past_bad), (va, true, true));
    exporter_process.kill();
    let mut b = [0u8];
    p.backend().read(start, &mut b).unwrap();
    assert_eq!(b[0], 77);
    p.backend().write(start, &[78], Stream::SYNC).unwrap();
    // Gone: new imports fail cleanly.
    assert!(matches!(ipc::import(&h), Err(UvmError::BadIpcHandle(_))));
    p.retire(va, 2 * G).unwrap();
}

#[test]
fn handles_round_trip_and_refuse_anything_else() {
    let h = IpcHandle { pid: 4242, device: 3, id: 17, secret: 0xdead_beef_cafe_f00d, chunks: 5, gran_log2: 21, offset: 256, size: (5 << 21) - 256 };
    let b = h.to_bytes();
    assert_eq!(IpcHandle::from_bytes(&b).unwrap(), h);
    assert_eq!(&b[0..8], b"GASANIPC");
    // Every single byte of the magic, the version and the reserved bytes matters.
    for i in (0..12).chain(56..64) {
        let mut bad = b;
        bad[i] ^= 0x40;
        assert!(matches!(IpcHandle::from_bytes(&bad), Err(UvmError::BadIpcHandle(_))), "byte {i}");
    }
    let refused = |h: IpcHandle| matches!(IpcHandle::from_bytes(&h.to_bytes()), Err(UvmError::BadIpcHandle(_)));
    assert!(refused(IpcHandle { size: (5 << 21) - 255, ..h }), "allocation past its chunks");
    assert!(refused(IpcHandle { offset: u64::MAX, ..h }), "offset wraps");
    assert!(refused(IpcHandle { chunks: 0, ..h }));
    assert!(refused(IpcHandle { size: 0, ..h }));
    assert!(refused(IpcHandle { gran_log2: 41, ..h }));
    assert!(refused(IpcHandle { pid: 0, ..h }));
    // A legacy cudaIpcMemHandle_t (driver memory) is not ours.
    assert!(IpcHandle::from_bytes(&[0x11; IPC_HANDLE_SIZE]).is_err());
    // An exporter refuses what an importer would.
    assert!(exporter().export(Vec::new(), 0, G, 0, 1).is_err());
}

#[test]
fn a_forged_secret_gets_nothing() {
    let _s = serial();
    let mut p = pool();
    let base = p.base() + 128 * G;
    p.commit(base, G).unwrap();
    let h = exporter().export(p.export(base, G).unwrap(), 0, G, 0, G).unwrap();
    assert!(matches!(ipc::import(&IpcHandle { secret: h.secret ^ 1, ..h }), Err(UvmError::BadIpcHandle(_))));
    assert!(matches!(ipc::import(&IpcHandle { id: h.id + 1000, ..h }), Err(UvmError::BadIpcHandle(_))));
    assert_eq!(ipc::import(&h).unwrap().len(), 1);
    assert!(exporter().withdraw(&h));
}

#[test]
fn exports_of_more_chunks_than_one_message_holds_arrive_in_order() {
    let _s = serial();
    let mut p = pool();
    // Two messages (250 descriptors at most each); three descriptors a chunk stay under the
    // common 1024 open files.
    let n = 260;
    let (src, dst) = (p.base() + 2048 * G, p.base() + 4096 * G);
    p.commit(src, n * G).unwrap();
    for i in 0..n {
        p.backend().write(src + i * G, &(i as u16).to_le_bytes(), Stream::SYNC).unwrap();
    }
    let h = exporter().export(p.export(src, n * G).unwrap(), 0, G, 0, n * G).unwrap();
    let fds = ipc::import(&h).unwrap();
    assert_eq!(fds.len(), n as usize);
    p.commit_imported(dst, 1, fds).unwrap();
    for i in 0..n {
        let mut b = [0u8; 2];
        p.backend().read(dst + i * G, &mut b).unwrap();
        assert_eq!(u16::from_le_bytes(b), i as u16, "chunk {i}");
    }
    assert!(exporter().withdraw(&h));
}

#[test]
fn the_ipc_selftest_passes_on_the_host_backend() {
    // The program the GPU check runs with --backend vmm (uvm-shim/gpu-check.sh), three processes.
    let out = Command::new(env!("CARGO_BIN_EXE_gasan-uvm")).args(["ipc-selftest", "--backend", "host"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches(" PASS ").count(), 5, "{text}");
    assert!(text.ends_with("ipc-selftest: all passed\n"), "{text}");
}

#[derive(Clone, Debug)]
enum Op {
    /// Commit and export `chunks` chunks, allocation at `offset` granules, `tail` bytes short of
    /// the end, first byte `byte`.
    Export {
        chunks: u64,
        offset: u64,
        tail: u64,
        byte: u8,
    },
    /// The importer process imports export `i` (modulo the count) and writes `byte` at its start.
    Import {
        i: usize,
        byte: u8,
    },
    /// The exporter writes `byte` at export `i`'s start, if it still maps it.
    Write {
        i: usize,
        byte: u8,
    },
    Withdraw {
        i: usize,
    },
    Retire {
        i: usize,
    },
    /// A third process imports export `i`, holds it, and is killed.
    KillHolder {
        i: usize,
    },
    /// The importer reads back its import `n`.
    Read {
        n: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..4, 0u64..8, 0u64..2000, any::<u8>()).prop_map(|(chunks, offset, tail, byte)| Op::Export { chunks, offset, tail, byte }),
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, byte)| Op::Import { i, byte }),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, byte)| Op::Write { i, byte }),
        1 => any::<usize>().prop_map(|i| Op::Withdraw { i }),
        1 => any::<usize>().prop_map(|i| Op::Retire { i }),
        1 => any::<usize>().prop_map(|i| Op::KillHolder { i }),
        2 => any::<usize>().prop_map(|n| Op::Read { n }),
    ]
}

/// One export in the model.
struct Exported {
    handle: IpcHandle,
    start: u64,
    offered: bool,
    mapped_here: bool,
    /// The byte at the allocation's start, whoever wrote it last.
    first: u8,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn two_processes_follow_the_model(ops in prop::collection::vec(op(), 4..30)) {
        let _s = serial();
        let mut p = pool();
        let mut next = p.base() + 256 * G;
        let mut peer = Peer::spawn();
        let mut model: Vec<Exported> = Vec::new();
        let mut imports: Vec<usize> = Vec::new();
        for o in ops {
            match o {
                Op::Export { chunks, offset, tail, byte } => {
                    let (va, len) = (next, chunks * G);
                    next += len + G;
                    p.commit(va, len).unwrap();
                    let offset = offset * SCALE.granule();
                    let size = len - offset - tail;
                    p.backend().write(va + offset, &[byte], Stream::SYNC).unwrap();
                    let h = exporter().export(p.export(va, len).unwrap(), 0, G, offset, size).unwrap();
                    model.push(Exported { handle: h, start: va + offset, offered: true, mapped_here: true, first: byte });
                }
                Op::Import { i, byte } if !model.is_empty() => {
                    let i = i % model.len();
                    let e = &mut model[i];
                    let a = peer.ask(&format!("import {} {byte}", hex(&e.handle.to_bytes())));
                    if e.offered {
                        let w: Vec<&str> = a.split(' ').collect();
                        prop_assert_eq!(w[0], "ok", "{}", a);
                        prop_assert_eq!(w[1].parse::<u8>().unwrap(), e.first);
                        prop_assert_eq!((w[3], w[4]), ("true", "true"), "bounds: {}", a);
                        e.first = byte;
                        imports.push(i);
                        if e.mapped_here {
                            let mut b = [0u8];
                            p.backend().read(e.start, &mut b).unwrap();
                            prop_assert_eq!(b[0], byte, "the importer's write, seen by the exporter");
                        }
                    } else {
                        prop_assert!(a.starts_with("err"), "withdrawn export imported: {}", a);
                    }
                }
                Op::Write { i, byte } if !model.is_empty() => {
                    let i = i % model.len();
                    if model[i].mapped_here {
                        p.backend().write(model[i].start, &[byte], Stream::SYNC).unwrap();
                        model[i].first = byte;
                    }
                }
                Op::Withdraw { i } if !model.is_empty() => {
                    let n = model.len();
                    let e = &mut model[i % n];
                    prop_assert_eq!(exporter().withdraw(&e.handle), e.offered);
                    e.offered = false;
                }
                Op::Retire { i } if !model.is_empty() => {
                    let n = model.len();
                    let e = &mut model[i % n];
                    if e.mapped_here {
                        let va = e.start - e.handle.offset;
                        p.retire(va, e.handle.len()).unwrap();
                        e.mapped_here = false;
                    }
                }
                Op::KillHolder { i } if !model.is_empty() => {
                    let e = &model[i % model.len()];
                    let mut holder = Peer::spawn();
                    let a = holder.ask(&format!("hold {}", hex(&e.handle.to_bytes())));
                    prop_assert_eq!(a == "holding", e.offered, "{}", a);
                    holder.kill();
                }
                Op::Read { n } if !imports.is_empty() => {
                    let n = n % imports.len();
                    prop_assert_eq!(peer.ask(&format!("read {n}")), format!("byte {}", model[imports[n]].first));
                }
                _ => {}
            }
        }
        for e in &model {
            exporter().withdraw(&e.handle);
        }
        drop(peer);
    }
}
