// Finds libcommux_core: COMMUX_LIB_DIR (the folder holding libcommux_core.so) when set, else
// pkg-config's `commux` (an install made with -DCOMMUX_WITH_TORCH=OFF; PKG_CONFIG_PATH may
// point at its lib/pkgconfig).
//
// The crate does not link the library: its absolute path is baked into the crate
// (COMMUX_CORE_LIBRARY, read by src/ffi.rs with env!) and the crate loads it with dlopen at
// its first call. A link would record only the library's SONAME (DT_NEEDED
// libcommux_core.so.0), which the loader finds through the executable's run path, and
// cargo gives a build script's link arguments (the run path) to the crate's own tests and
// binaries only, never to a dependent crate's: a dependent's binaries would then need
// LD_LIBRARY_PATH. The baked path travels inside the compiled crate to every binary that
// uses it, so those run with nothing set.
use std::env;
use std::path::{Path, PathBuf};
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

/// The library's file in `dir`: its SONAME (the ABI a link would have recorded) when the
/// install has it, else the development link.
fn library_in(dir: &Path) -> Option<PathBuf> {
    ["libcommux_core.so.0", "libcommux_core.so"]
        .iter()
        .map(|name| dir.join(name))
        .find(|path| path.exists())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=COMMUX_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_SYSROOT_DIR");
    let dir = env::var("COMMUX_LIB_DIR").ok().filter(|d| !d.is_empty()).or_else(pkg_config_libdir);
    let dir = match dir {
        Some(d) => PathBuf::from(d),
        None => panic!(
            "commux: cannot find libcommux_core: set COMMUX_LIB_DIR to its folder, or \
             PKG_CONFIG_PATH to <install>/lib/pkgconfig (an install made with \
             cmake -DCOMMUX_WITH_TORCH=OFF)"
        ),
    };
    // Absolute (COMMUX_LIB_DIR may be relative to where cargo ran), the folder's links
    // resolved but not the file's: a newer library of the same ABI installed there later
    // is the one loaded.
    let dir = std::fs::canonicalize(&dir)
        .unwrap_or_else(|e| panic!("commux: no folder {} ({e})", dir.display()));
    let library = match library_in(&dir) {
        Some(path) => path,
        None => panic!("commux: no libcommux_core.so in {}", dir.display()),
    };
    let library = library
        .to_str()
        .unwrap_or_else(|| panic!("commux: the path {} is not UTF-8", library.display()))
        .to_string();
    if library.contains('\0') || library.contains('\n') {
        panic!("commux: the path {library:?} cannot be baked into the crate");
    }
    println!("cargo:rustc-env=COMMUX_CORE_LIBRARY={library}");
    // For dependents' build scripts (DEP_COMMUX_CORE_LIBRARY), should one want it.
    println!("cargo:library={library}");
}
