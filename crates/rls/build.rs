//! Generates the gRPC types and service of Envoy's rate limit service API from the vendored
//! protos (proto/README.md), with protoc (the Makefile installs it: Debian's
//! protobuf-compiler).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    tonic_build::configure()
        .build_server(true)
        .build_client(true)
        .build_transport(false)
        .compile_protos(&["proto/envoy/service/ratelimit/v3/rls.proto"], &["proto"])?;
    Ok(())
}
