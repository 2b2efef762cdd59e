//! Records the git commit the binary was built from, for `espgw --version`.
//! `ESPGW_GIT_COMMIT` overrides it (builds from a source tarball); "unknown" where neither
//! is available.
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=ESPGW_GIT_COMMIT");
    // A new commit moves HEAD or the branch it points to (loose or packed).
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        // Only files that exist: cargo takes a missing one as changed on every build.
        // (`git gc` packing the branch removes its loose file, which then counts as changed.)
        let mut watch = vec![format!("{git_dir}/HEAD"), format!("{git_dir}/packed-refs")];
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch.push(format!("{git_dir}/{branch}"));
        }
        for path in watch.iter().filter(|p| std::path::Path::new(p).exists()) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let commit = std::env::var("ESPGW_GIT_COMMIT")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ESPGW_GIT_COMMIT={commit}");
}
