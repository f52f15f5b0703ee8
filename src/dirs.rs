//! Where toolsearch keeps files of its own on this machine.

use std::path::PathBuf;

/// The cache root: `$XDG_CACHE_HOME/toolsearch`, else `$HOME/.cache/toolsearch`; none
/// without either. What lives under it (startup snapshots, probe results, embeddings) can
/// be deleted at any time and is rebuilt.
pub fn cache_root() -> Option<PathBuf> {
    // A relative XDG_CACHE_HOME is to be ignored (XDG base directory spec); so is HOME.
    let base = match std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from) {
        Some(d) if d.is_absolute() => d,
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    base.is_absolute().then(|| base.join("toolsearch"))
}
