//! A real third-party server in a sandbox (docs/sandbox.md): npm `server-filesystem`, given one
//! folder as its argument and a profile that may read its package and write only that folder,
//! with the network off, lists, reads and writes that folder through the proxy (node, its
//! package and the folder are all it needs).

use std::os::unix::fs::PermissionsExt;

use anyhow::ensure;
use serde_json::json;

use crate::servers_people_run::call_text;
use crate::support::eventually;
use crate::support::fixture::{self, DEADLINE, Era};
use crate::support::peers::{FILESYSTEM_PKG, ensure_installed};
use crate::support::proxy::{ProxyProcess, toml_str};
use crate::support::repo_root;

#[tokio::test(flavor = "multi_thread")]
async fn server_filesystem_in_a_sandbox_lists_and_reads_its_folder_through_the_proxy() -> anyhow::Result<()> {
    ensure_installed();
    let ground = tempfile::tempdir()?;
    let ground_path = ground.path().canonicalize()?;
    let folder = ground_path.join("notes");
    std::fs::create_dir(&folder)?;
    std::fs::write(folder.join("hello.txt"), "hello from a sandbox")?;
    // Open to user nobody, whom a root proxy runs a sandboxed server as: only the sandbox refuses.
    for (path, mode) in [(&ground_path, 0o755), (&folder, 0o777)] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    let package = repo_root().join(".peers/servers/node_modules");
    let entry = package.join(FILESYSTEM_PKG).join("dist/index.js");
    let config = format!(
        "[[upstreams]]\nname = \"fs\"\ncommand = \"node\"\nargs = [{}, {}]\n\n\
         [upstreams.sandbox]\nread = [{}]\nwrite = [{}]\nnetwork = false\nmemory = \"1GiB\"\nprocesses = 64\n",
        toml_str(entry.to_str().expect("UTF-8 path")),
        toml_str(folder.to_str().expect("UTF-8 path")),
        toml_str(package.to_str().expect("UTF-8 path")),
        toml_str(folder.to_str().expect("UTF-8 path")),
    );
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("fs", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let listing = eventually(DEADLINE, "server-filesystem lists its folder", || {
        call_text(host.peer(), "fs__list_directory", json!({ "path": folder }))
    })
    .await?;
    ensure!(listing.contains("[FILE] hello.txt"), "{listing}");
    let read = call_text(host.peer(), "fs__read_text_file", json!({ "path": folder.join("hello.txt") })).await?;
    ensure!(read == "hello from a sandbox", "{read}");
    let written = json!({ "path": folder.join("new.txt"), "content": "written in the sandbox" });
    call_text(host.peer(), "fs__write_file", written).await?;
    ensure!(std::fs::read_to_string(folder.join("new.txt"))? == "written in the sandbox");
    Ok(())
}
