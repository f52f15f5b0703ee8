//! Fuzzes the decoding of frames from a sandbox child: any bytes must give frames or an
//! error, never a panic; an accepted frame respects the size limit; and the framed codec
//! gives the same frames however the bytes are cut into reads (the first byte picks the
//! cut), as the run loop relies on.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolsearch::sandbox::protocol::{FrameCodec, decode};
use tokio_util::codec::Decoder;

const LIMIT: usize = 4096;

fn frames(chunks: &[&[u8]]) -> Vec<Result<usize, String>> {
    let mut codec = FrameCodec::new(LIMIT);
    let mut buf = bytes::BytesMut::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(f)) => {
                    assert!(f.bytes <= LIMIT);
                    out.push(Ok(f.bytes));
                }
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(e.to_string()));
                    return out;
                }
            }
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    if decode(data, LIMIT).is_ok() {
        assert!(data.len() <= LIMIT);
    }
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let cut = cut as usize % (rest.len() + 1);
    let whole = frames(&[rest]);
    let split = frames(&[&rest[..cut], &rest[cut..]]);
    // A line too long is refused as soon as the buffer passes the limit, so where the error
    // comes may depend on the cut; the frames before it may not.
    let ok = |v: &[Result<usize, String>]| v.iter().take_while(|f| f.is_ok()).cloned().collect::<Vec<_>>();
    if whole.iter().all(Result::is_ok) && split.iter().all(Result::is_ok) {
        assert_eq!(whole, split);
    } else {
        let (a, b) = (ok(&whole), ok(&split));
        let n = a.len().min(b.len());
        assert_eq!(a[..n], b[..n]);
    }
});
