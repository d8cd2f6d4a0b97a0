//! The codec of the generated client and server: prost's, except that a
//! message that does not decode is `INVALID_ARGUMENT`, not `INTERNAL`.
//!
//! The usual cause is a `string` field holding bytes that are not UTF-8
//! (proto3 requires UTF-8 in string fields; prost refuses the message). That
//! is the sender's mistake, so it gets the status that names bad input, and
//! the message says which field failed (prost's `DecodeError` text, such as
//! `failed to decode Protobuf message: ExecRequest.script: invalid string
//! value: data is not UTF-8 encoded`).

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// prost encoding, and decoding that answers `INVALID_ARGUMENT` on a
/// message that does not decode. `T` is sent, `U` received.
#[derive(Debug, Clone)]
pub struct ApiCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for ApiCodec<T, U> {
    fn default() -> Self {
        ApiCodec { _pd: PhantomData }
    }
}

impl<T, U> Codec for ApiCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ApiDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ApiDecoder(ProstDecoder::new(BufferSettings::default()))
    }
}

/// prost's decoder, with decode failures made `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct ApiDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default> Decoder for ApiDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|status| {
            if status.code() == tonic::Code::Internal {
                let mut bad = Status::invalid_argument(format!(
                    "EINVAL: {} (string fields must be UTF-8)",
                    status.message()
                ));
                bad.metadata_mut().insert(
                    crate::ERRNO_METADATA_KEY,
                    tonic::metadata::MetadataValue::from_static("EINVAL"),
                );
                bad
            } else {
                status
            }
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
