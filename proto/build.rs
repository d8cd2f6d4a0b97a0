//! Compiles `agentcomputer/v1/agentcomputer.proto` with `protox`, a pure-Rust
//! protobuf compiler, so building needs no system `protoc`. The descriptor
//! set, with its source code info (the comments), is also written to
//! `$OUT_DIR/agentcomputer_v1.fds.bin` for the API reference
//! (`src/apidoc.rs`).

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "agentcomputer/v1/agentcomputer.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["."])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("agentcomputer_v1.fds.bin"),
        fds.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Undecodable requests (a string field that is not UTF-8) are
        // INVALID_ARGUMENT, not prost's INTERNAL (src/codec.rs).
        .codec_path("crate::codec::ApiCodec")
        .compile_fds(fds)?;
    Ok(())
}
