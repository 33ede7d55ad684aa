//! Lists `docs/*.md` for `src/docs.rs`, so a new page is bundled without editing code.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // At run time, not `env!`: a build-script binary compiled in another checkout
    // (a CI clone sharing CARGO_TARGET_DIR) is reused by cargo, and a path baked in
    // at its compile time would point at that other, perhaps deleted, checkout.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let docs = Path::new(&manifest).join("../../docs");
    println!("cargo:rerun-if-changed={}", docs.display());
    let mut names: Vec<String> = std::fs::read_dir(&docs)
        .map(|dir| {
            dir.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                // Exactly ".md": the Python side lists the same files.
                .filter(|n| Path::new(n).extension().is_some_and(|e| e == "md"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    if names.is_empty() {
        println!(
            "cargo:warning=no docs/*.md under {}: docs_search will have nothing to search",
            docs.display()
        );
    }
    let mut out = String::from("&[\n");
    for name in &names {
        let path = docs.join(name);
        println!("cargo:rerun-if-changed={}", path.display());
        let _ = writeln!(
            out,
            "    ({name:?}, include_str!({:?})),",
            path.display().to_string()
        );
    }
    out.push(']');
    let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("bundled_docs.rs");
    std::fs::write(dest, out).expect("write bundled_docs.rs");
}
