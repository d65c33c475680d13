#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemill_cloud::fuzzing::api_json(data));
