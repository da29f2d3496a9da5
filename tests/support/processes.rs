//! The processes a proxy started, from `/proc`: which run below it, what each holds resident,
//! the TCP sockets a process has open and the names of its environment variables.

use std::collections::HashSet;

use anyhow::Context;

/// One TCP socket of a process, as `/proc/<pid>/net/tcp` (or `tcp6`) lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpSocket {
    /// In the `LISTEN` state.
    pub listening: bool,
    pub local_port: u16,
    /// The peer's port (0 for a listener).
    pub remote_port: u16,
}

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

/// Every TCP socket (IPv4 and IPv6) process `pid` has open: its `socket:[inode]` descriptors
/// (`/proc/<pid>/fd`) looked up in `/proc/<pid>/net/tcp` and `tcp6`.
pub fn tcp_sockets(pid: u32) -> anyhow::Result<Vec<TcpSocket>> {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))?
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter_map(|target| Some(target.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.to_string()))
        .collect();
    let mut sockets = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))?;
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [_, local, remote, state, _, _, _, _, _, inode, ..] = fields[..] else { continue };
            if inodes.contains(inode) {
                let (local_port, remote_port) = (port(local)?, port(remote)?);
                sockets.push(TcpSocket { listening: state == "0A", local_port, remote_port });
            }
        }
    }
    Ok(sockets)
}

/// The names of process `pid`'s environment variables (`/proc/<pid>/environ`).
pub fn environment_names(pid: u32) -> anyhow::Result<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/environ"))?;
    let names = raw.split(|byte| *byte == 0).filter(|entry| !entry.is_empty());
    Ok(names.map(|entry| String::from_utf8_lossy(entry).split('=').next().unwrap_or_default().to_string()).collect())
}

/// The port of a `/proc/net/tcp` address (`0100007F:1F90`, hex).
fn port(address: &str) -> anyhow::Result<u16> {
    let (_, port) = address.rsplit_once(':').with_context(|| format!("not an address: {address}"))?;
    Ok(u16::from_str_radix(port, 16)?)
}
