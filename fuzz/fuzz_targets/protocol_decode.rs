//! Fuzzes the decoder of frames from a sandbox child: any bytes must give a frame or an
//! error, never a panic, and an accepted frame must respect the size limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolsearch::sandbox::protocol::decode;

fuzz_target!(|data: &[u8]| {
    const LIMIT: usize = 4096;
    if decode(data, LIMIT).is_ok() {
        assert!(data.len() <= LIMIT);
    }
});
