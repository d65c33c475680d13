//! Git commit and build date for `--version` (see shared/build/version.rs).

include!("../shared/build/version.rs");

fn main() {
    emit();
}
