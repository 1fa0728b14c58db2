// Finds libcommux_core: COMMUX_LIB_DIR (the folder holding libcommux_core.so) when set, else
// pkg-config's `commux` (an install made with -DCOMMUX_WITH_TORCH=OFF; PKG_CONFIG_PATH may
// point at its lib/pkgconfig). The library's folder goes into the rpath of the crate's tests
// and binaries, so they run without LD_LIBRARY_PATH.
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn pkg_config_libdir() -> Option<String> {
    let out = Command::new("pkg-config").args(["--variable=libdir", "commux"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    if dir.is_empty() {
        None
    } else {
        Some(dir)
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=COMMUX_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let dir = env::var("COMMUX_LIB_DIR").ok().filter(|d| !d.is_empty()).or_else(pkg_config_libdir);
    let dir = match dir {
        Some(d) => PathBuf::from(d),
        None => panic!(
            "commux: cannot find libcommux_core: set COMMUX_LIB_DIR to its folder, or \
             PKG_CONFIG_PATH to <install>/lib/pkgconfig (an install made with \
             cmake -DCOMMUX_WITH_TORCH=OFF)"
        ),
    };
    if !dir.join("libcommux_core.so").exists() {
        panic!("commux: no libcommux_core.so in {}", dir.display());
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=commux_core");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
}
