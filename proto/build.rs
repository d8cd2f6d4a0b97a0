//! Compiles `agentcomputer/v1/agentcomputer.proto` with `protox`, a pure-Rust
//! protobuf compiler, so building needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "agentcomputer/v1/agentcomputer.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["."])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Undecodable requests (a string field that is not UTF-8) are
        // INVALID_ARGUMENT, not prost's INTERNAL (src/codec.rs).
        .codec_path("crate::codec::ApiCodec")
        .compile_fds(fds)?;
    Ok(())
}
