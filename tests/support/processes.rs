//! The processes a proxy started, from `/proc`: which run below it, and what each holds resident.

use anyhow::Context;

/// Every process below `root` (pid, command line with its arguments joined by spaces).
pub fn descendants(root: u32) -> Vec<(u32, String)> {
    let all: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    let mut found = vec![root];
    let mut index = 0;
    while index < found.len() {
        let parent = found[index];
        found.extend(all.iter().filter(|(_, ppid)| *ppid == parent).map(|(pid, _)| *pid));
        index += 1;
    }
    found.into_iter().skip(1).map(|pid| (pid, command_line(pid))).collect()
}

/// The processes below `root` whose command line contains `needle` (the launcher every stdio
/// child starts through names its program too: only the last process of each chain counts).
pub fn running_below(root: u32, needle: &str) -> Vec<u32> {
    let matching: Vec<u32> =
        descendants(root).into_iter().filter(|(_, line)| line.contains(needle)).map(|(pid, _)| pid).collect();
    matching.iter().copied().filter(|pid| !matching.iter().any(|other| parent_of(*other) == Some(*pid))).collect()
}

/// The resident memory of process `pid`, in bytes.
pub fn resident_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).context("no VmRSS")?;
    let kib: u64 = line.split_whitespace().nth(1).context("VmRSS value")?.parse()?;
    Ok(kib * 1024)
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The command line of `pid`, its arguments joined by spaces (empty once it is gone).
pub fn command_line(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|byte| *byte == 0).map(String::from_utf8_lossy).collect::<Vec<_>>().join(" ").trim().to_string()
}
