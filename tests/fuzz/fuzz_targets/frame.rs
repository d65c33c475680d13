#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemill_proto::fuzzing::frame(data));
