//! `vigil own-state`: the DaemonSet's init container, which gives the state
//! directory to the user the agent runs as.

use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(super) struct OwnStateArgs {
    /// The agent's state directory.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/vigil")]
    pub(super) state_dir: PathBuf,
    /// The agent's user and group, as numbers.
    #[arg(long, value_name = "UID:GID", value_parser = user, default_value = "65532:65532")]
    pub(super) user: (u32, u32),
}

impl OwnStateArgs {
    pub(super) fn execute(self) -> anyhow::Result<()> {
        let (uid, gid) = self.user;
        let changed = crate::base::ownership::give(&self.state_dir, uid, gid)?;
        println!(
            "{}: owned by {uid}:{gid} ({changed} entr{} changed owner)",
            self.state_dir.display(),
            if changed == 1 { "y" } else { "ies" }
        );
        Ok(())
    }
}

/// Parses `UID:GID`.
fn user(text: &str) -> Result<(u32, u32), String> {
    let (uid, gid) = text.split_once(':').unwrap_or_default();
    match (uid.parse(), gid.parse()) {
        (Ok(uid), Ok(gid)) => Ok((uid, gid)),
        _ => Err(format!("{text:?} is not UID:GID (two numbers)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_two_numbers() {
        assert_eq!(user("65532:1"), Ok((65532, 1)));
        assert!(user("65532").unwrap_err().contains("UID:GID"));
        assert!(user("vigil:vigil").unwrap_err().contains("UID:GID"));
    }
}
