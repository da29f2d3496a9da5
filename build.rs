//! Lays out the release binary's hot path together: the functions a cache hit and a miss run
//! (`src/hot-path.order`, written by `scripts/link_order.sh` from callgrind profiles) are placed
//! side by side by the linker, in that order. A read runs after the proxy sat idle (a miss waits
//! ~1 ms for its upstream), when other processes have emptied the caches; its ~4,900 lines of
//! code were spread over ~540 pages of text, now ~310 (BENCHMARKS.md, "Link order").
//!
//! Only where the linker is LLD, which understands `--symbol-ordering-file`: the default of
//! `x86_64-unknown-linux-gnu` since Rust 1.90, unless a linker of its own is configured. A
//! symbol the file names and the binary lacks (a dependency or the toolchain changed since the
//! file was written: names carry a hash of both) is skipped silently; the binary is the same code
//! either way. `MCP_PROXY_LINK_ORDER=off` turns it off.

use std::env;
use std::path::Path;
use std::process::Command;

const ORDER: &str = "src/hot-path.order";
const TARGET: &str = "x86_64-unknown-linux-gnu";
const BIN: &str = "mcp-resource-proxy";

fn main() {
    println!("cargo::rerun-if-changed={ORDER}");
    println!("cargo::rerun-if-env-changed=MCP_PROXY_LINK_ORDER");
    println!("cargo::rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    match skipped() {
        Some(Skip::Quietly) => return,
        Some(Skip::Because(why)) => {
            println!("cargo::warning=the hot-path link order is not applied: {why}");
            return;
        }
        None => {}
    }
    let order = Path::new(&env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join(ORDER);
    if order.is_file() {
        println!("cargo::rustc-link-arg-bin={BIN}=-Wl,--symbol-ordering-file={}", order.display());
        println!("cargo::rustc-link-arg-bin={BIN}=-Wl,--no-warn-symbol-ordering");
    }
}

enum Skip {
    /// A debug build, another target, a rustc older than 1.90 (its default linker is not LLD).
    Quietly,
    /// A release build that would have had it.
    Because(&'static str),
}

/// Why the order is not applied, when it is not; `None` for a release build linked by LLD.
fn skipped() -> Option<Skip> {
    let var = |name: &str| env::var(name).unwrap_or_default();
    if var("PROFILE") != "release" || var("TARGET") != TARGET {
        return Some(Skip::Quietly);
    }
    if var("MCP_PROXY_LINK_ORDER") == "off" {
        return Some(Skip::Because("MCP_PROXY_LINK_ORDER=off"));
    }
    if !var("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_empty() {
        return Some(Skip::Because("a linker of its own is configured"));
    }
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    if flags.contains("linker") || flags.contains("-fuse-ld") {
        return Some(Skip::Because("RUSTFLAGS choose the linker"));
    }
    match rustc_minor() {
        Some(minor) if minor >= 90 => None,
        Some(_) => Some(Skip::Quietly),
        None => Some(Skip::Because("the rustc version is unknown")),
    }
}

/// The minor version of the rustc cargo uses (`rustc 1.95.0 (…)` gives 95).
fn rustc_minor() -> Option<u32> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let output = Command::new(rustc).arg("--version").output().ok()?;
    let version = String::from_utf8(output.stdout).ok()?;
    version.split_whitespace().nth(1)?.split('.').nth(1)?.parse().ok()
}
