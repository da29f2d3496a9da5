//! A profile as a Landlock ruleset: file-system access beneath the allowed paths (reading:
//! read, list, execute; writing: all of it), TCP connect and bind refused when the network
//! is off, and signals and abstract unix sockets scoped to the sandbox. Without `best_effort`,
//! a kernel that lacks what the profile needs (Landlock file rules with truncation, ABI 3;
//! TCP rules, ABI 4, when the network is off) refuses the ruleset, so the server never starts
//! unconfined; the newer rights (ioctl on devices, scopes) are taken where the kernel has them.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};

use super::{DEVICES, SYSTEM_READABLE, SandboxProfile};

/// A ruleset made before the fork, applied in the child by [`Rules::restrict_self`].
pub(super) struct Rules {
    created: RulesetCreated,
    best_effort: bool,
}

impl Rules {
    /// The ruleset of `profile` for a server whose program file is `program`.
    pub(super) fn build(profile: &SandboxProfile, program: &Option<PathBuf>) -> Result<Rules, String> {
        let required = if profile.best_effort { CompatLevel::BestEffort } else { CompatLevel::HardRequirement };
        let unavailable = |error: landlock::RulesetError| {
            format!(
                "this kernel cannot enforce the upstream's sandbox ({error}); Landlock with file rules (Linux 6.2+) \
                 and, with `network = false`, TCP rules (Linux 6.7+) is needed: the upstream is not started \
                 (`best_effort = true` starts it with what the kernel enforces)"
            )
        };
        let mut ruleset = Ruleset::default()
            .set_compatibility(required)
            .handle_access(AccessFs::from_all(ABI::V3))
            .map_err(unavailable)?;
        if !profile.network {
            ruleset = ruleset.handle_access(AccessNet::from_all(ABI::V4)).map_err(unavailable)?;
        }
        let ruleset = ruleset
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(ABI::V7))
            .and_then(|ruleset| ruleset.scope(Scope::from_all(ABI::V7)))
            .and_then(Ruleset::create)
            .map_err(unavailable)?;
        let readable =
            SYSTEM_READABLE.iter().map(PathBuf::from).chain(profile.read.iter().cloned()).chain(program.clone());
        let mut created = ruleset;
        for path in readable.filter(|path| path.exists()) {
            created = add(created, &path, AccessFs::from_read(ABI::V7))?;
        }
        for device in DEVICES.iter().map(Path::new).filter(|path| path.exists()) {
            let access =
                if *device == *"/dev/null" { AccessFs::from_all(ABI::V7) } else { AccessFs::from_read(ABI::V7) };
            created = add(created, device, access)?;
        }
        for path in &profile.write {
            created = add(created, path, AccessFs::from_all(ABI::V7))?;
        }
        Ok(Rules { created, best_effort: profile.best_effort })
    }

    /// Restrict the calling process (the forked server, before exec).
    pub(super) fn restrict_self(self) -> std::io::Result<()> {
        let status = self.created.restrict_self().map_err(std::io::Error::other)?;
        if status.ruleset == RulesetStatus::NotEnforced && !self.best_effort {
            return Err(std::io::Error::other("Landlock enforced nothing of the profile"));
        }
        Ok(())
    }
}

/// Allow `access` beneath `path` (a file gets only the rights that apply to files).
fn add(created: RulesetCreated, path: &Path, access: landlock::BitFlags<AccessFs>) -> Result<RulesetCreated, String> {
    let fd = PathFd::new(path).map_err(|error| format!("cannot open `{}` for its rule: {error}", path.display()))?;
    let access = if path.is_dir() { access } else { access & AccessFs::from_file(ABI::V7) };
    created
        .add_rule(PathBeneath::new(fd, access))
        .map_err(|error| format!("cannot allow `{}`: {error}", path.display()))
}
