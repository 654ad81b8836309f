//! Records the commit the binary is built from, for `leasehold --version`: from
//! `LEASEHOLD_BUILD_COMMIT` when a packager sets it (a build from a source archive has no
//! repository), else from git, else "unknown".

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=LEASEHOLD_BUILD_COMMIT");
    let commit = std::env::var("LEASEHOLD_BUILD_COMMIT")
        .ok()
        .filter(|commit| !commit.is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=LEASEHOLD_COMMIT={commit}");
}

/// The short hash of HEAD, if this is a git checkout with git installed; asks cargo to run
/// again when HEAD moves.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| {
        let output = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(output.stdout).ok()?;
        output.status.success().then(|| text.trim().to_owned())
    };
    // Only this crate's own repository counts: a crate unpacked from a registry into some
    // other git checkout (a home directory kept in git) is not built from that commit.
    git(&["ls-files", "--error-unmatch", "build.rs"])?;
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    let git_dir = git(&["rev-parse", "--absolute-git-dir"])?;
    let git_dir = Path::new(&git_dir);
    // HEAD names the branch; the branch's ref (loose or packed) names the commit.
    println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
    if let Ok(head) = std::fs::read_to_string(git_dir.join("HEAD")) {
        if let Some(reference) = head.trim().strip_prefix("ref: ") {
            println!(
                "cargo:rerun-if-changed={}",
                git_dir.join(reference).display()
            );
        }
    }
    println!(
        "cargo:rerun-if-changed={}",
        git_dir.join("packed-refs").display()
    );
    Some(commit)
}
