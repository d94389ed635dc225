#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dionfs_fuzzing::nfs4_callback(data));
