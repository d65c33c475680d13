//! Entry points for the fuzz targets (`tests/fuzz`) and for replaying their
//! corpus in `cargo test`: the job-file parser and the API's JSON bodies.
//! Each takes any bytes and must neither panic nor allocate without bound.

use crate::api::{ApiTokenRequest, TokenRequest};
use crate::job::JobFile;

/// A job file as `jobs submit --file` reads it.
pub fn job_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(job) = JobFile::from_toml(text, "fuzz.toml") {
        let _ = job.validate();
    }
}

/// The JSON bodies the API accepts.
pub fn api_json(data: &[u8]) {
    if let Ok(job) = serde_json::from_slice::<JobFile>(data) {
        let _ = job.validate();
    }
    let _ = serde_json::from_slice::<TokenRequest>(data);
    let _ = serde_json::from_slice::<ApiTokenRequest>(data);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn any_bytes_are_safe(data in proptest::collection::vec(any::<u8>(), 0..2_048)) {
            job_toml(&data);
            api_json(&data);
        }

        #[test]
        fn any_text_is_safe(text in "\\\\PC{0,512}") {
            job_toml(text.as_bytes());
            api_json(text.as_bytes());
        }
    }

    #[test]
    fn the_example_job_file_parses() {
        job_toml(include_bytes!("../../configs/job.toml"));
    }
}
