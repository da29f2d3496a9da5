//! The `mcp-resource-proxy` binary: the allocator, then the library's command line
//! ([`mcp_resource_proxy::command_line`]).

use std::process::ExitCode;

/// mimalloc instead of glibc's allocator: a cache hit makes about a hundred small allocations,
/// and glibc's malloc and free were a quarter of its instructions (docs/benchmarks-notebook.md).
/// Built without transparent huge pages (`no_thp`) and told to return freed memory at once
/// ([`return_freed_memory_at_once`]): with its defaults the proxy's resident memory was a third
/// to twice that under glibc (a 2 MiB page for every arena touched; freed pages kept for 1 s).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its position in `mi_option_e`, mimalloc.h, which keeps
/// retired options so that the numbers never move); libmimalloc-sys names no constant for it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Purge (return to the system) freed allocator pages at once instead of after 1 s.
fn return_freed_memory_at_once() {
    // SAFETY: `mi_option_set` stores an integer in mimalloc's table of options (an atomic
    // store, safe from any thread at any time); 0 is a valid purge delay ("immediately").
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

fn main() -> ExitCode {
    return_freed_memory_at_once();
    mcp_resource_proxy::command_line::main()
}
