//! Photos for vision models: an image is sent as it is when it fits the limits
//! (longest side, bytes), and is otherwise decoded, turned upright (EXIF orientation),
//! shrunk and encoded again. Only JPEG and PNG are decoded (the `image` crate with just
//! those two codecs: ~0.5 MB of the wheel, docs/decisions.md); a WebP is passed through
//! when it is small enough; anything else is refused with a reason.

use std::io::Cursor;

use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType as PngFilter, PngEncoder};
use image::metadata::Orientation;
use image::{DynamicImage, ImageDecoder, ImageEncoder, ImageFormat, ImageReader, Limits, RgbImage};

use crate::error::{CoreError, Result};

/// Decoding stops beyond this many pixels (a 48 MP phone photo still fits): a bigger
/// picture would need hundreds of MB on a Pi.
pub const MAX_PIXELS: u64 = 50_000_000;
/// JPEG qualities tried in turn until the result fits `max_bytes`.
const QUALITIES: [u8; 3] = [85, 70, 55];

/// An image ready for a model.
#[derive(Debug, Clone)]
pub struct Fitted {
    pub data: Vec<u8>,
    pub mime: &'static str,
    /// Pixels after fitting; 0 when not known (a WebP passed through).
    pub width: u32,
    pub height: u32,
    /// The bytes were re-encoded (shrunk, turned upright or compressed harder).
    pub resized: bool,
}

fn invalid(msg: impl Into<String>) -> CoreError {
    CoreError::InvalidInput(msg.into())
}

/// A codec error on one line (the model reads it in a note).
fn codec(what: &str, e: &image::ImageError) -> CoreError {
    let text = e.to_string();
    invalid(format!(
        "{what}: {}",
        text.lines().next().unwrap_or("").trim()
    ))
}

fn mime_of(format: ImageFormat) -> &'static str {
    match format {
        ImageFormat::Png => "image/png",
        _ => "image/jpeg",
    }
}

fn sniff(data: &[u8]) -> Option<&'static str> {
    if data.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if data.len() >= 12 && &data[..4] == b"RIFF" && &data[8..12] == b"WEBP" {
        Some("image/webp")
    } else if data.starts_with(b"GIF8") {
        Some("image/gif")
    } else if data.len() >= 12 && &data[4..8] == b"ftyp" {
        Some("image/heic")
    } else {
        None
    }
}

/// `data` as an image whose longest side is at most `max_side` pixels and whose size is
/// at most `max_bytes`. JPEG and PNG within both limits and already upright come back
/// unchanged; otherwise they are decoded and encoded again (PNG stays PNG when it then
/// fits, else JPEG). Errors (`InvalidInput`) say why the image cannot be used.
pub fn fit_image(data: &[u8], max_side: u32, max_bytes: usize) -> Result<Fitted> {
    if max_side == 0 || max_bytes == 0 {
        return Err(invalid("max_side and max_bytes must be positive"));
    }
    let format = match sniff(data) {
        Some("image/jpeg") => ImageFormat::Jpeg,
        Some("image/png") => ImageFormat::Png,
        Some("image/webp") if data.len() <= max_bytes => {
            return Ok(Fitted {
                data: data.to_vec(),
                mime: "image/webp",
                width: 0,
                height: 0,
                resized: false,
            })
        }
        Some("image/webp") => {
            return Err(invalid(format!(
                "a WebP image of {} bytes is over the {max_bytes}-byte limit, and Klaw \
                 shrinks only JPEG and PNG",
                data.len()
            )))
        }
        Some(other) => {
            return Err(invalid(format!(
                "{other} is not sent to models: use JPEG, PNG or WebP"
            )))
        }
        None => return Err(invalid("not an image Klaw can read (JPEG, PNG or WebP)")),
    };
    let mut reader = ImageReader::new(Cursor::new(data));
    reader.set_format(format);
    let mut limits = Limits::default();
    limits.max_alloc = Some(MAX_PIXELS * 4 + (64 << 20));
    reader.limits(limits);
    let mut decoder = reader
        .into_decoder()
        .map_err(|e| codec("the image cannot be read", &e))?;
    let (width, height) = decoder.dimensions();
    if u64::from(width) * u64::from(height) > MAX_PIXELS {
        return Err(invalid(format!(
            "the image has {width}x{height} pixels, more than Klaw decodes ({} MP)",
            MAX_PIXELS / 1_000_000
        )));
    }
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let upright = orientation == Orientation::NoTransforms;
    if upright && width.max(height) <= max_side && data.len() <= max_bytes {
        return Ok(Fitted {
            data: data.to_vec(),
            mime: mime_of(format),
            width,
            height,
            resized: false,
        });
    }
    let mut img = DynamicImage::from_decoder(decoder)
        .map_err(|e| codec("the image cannot be decoded", &e))?;
    img.apply_orientation(orientation);
    let img = shrink(img, max_side);
    let (w, h) = (img.width(), img.height());
    if format == ImageFormat::Png {
        let png = encode_png(&img)?;
        if png.len() <= max_bytes {
            return Ok(Fitted {
                data: png,
                mime: "image/png",
                width: w,
                height: h,
                resized: true,
            });
        }
    }
    let rgb = flatten(img);
    for quality in QUALITIES {
        let jpeg = encode_jpeg(&rgb, quality)?;
        if jpeg.len() <= max_bytes {
            return Ok(Fitted {
                data: jpeg,
                mime: "image/jpeg",
                width: w,
                height: h,
                resized: true,
            });
        }
    }
    Err(invalid(format!(
        "the image does not fit in {max_bytes} bytes even at {w}x{h} pixels, JPEG quality {}",
        QUALITIES[QUALITIES.len() - 1]
    )))
}

/// The image scaled down (area averaging) so its longest side is at most `max_side`.
fn shrink(img: DynamicImage, max_side: u32) -> DynamicImage {
    let (w, h) = (img.width(), img.height());
    let longest = w.max(h);
    if longest <= max_side {
        return img;
    }
    let scale = f64::from(max_side) / f64::from(longest);
    let nw = ((f64::from(w) * scale).round() as u32).clamp(1, max_side);
    let nh = ((f64::from(h) * scale).round() as u32).clamp(1, max_side);
    if img.color().has_alpha() {
        DynamicImage::ImageRgba8(image::imageops::thumbnail(&img.into_rgba8(), nw, nh))
    } else {
        DynamicImage::ImageRgb8(image::imageops::thumbnail(&img.into_rgb8(), nw, nh))
    }
}

/// RGB for JPEG: transparency composited onto white (a screenshot's empty background
/// stays light).
fn flatten(img: DynamicImage) -> RgbImage {
    if !img.color().has_alpha() {
        return img.into_rgb8();
    }
    let rgba = img.into_rgba8();
    RgbImage::from_fn(rgba.width(), rgba.height(), |x, y| {
        let p = rgba.get_pixel(x, y).0;
        let a = u16::from(p[3]);
        let mix = |c: u8| ((u16::from(c) * a + 255 * (255 - a)) / 255) as u8;
        image::Rgb([mix(p[0]), mix(p[1]), mix(p[2])])
    })
}

fn encode_jpeg(rgb: &RgbImage, quality: u8) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, quality)
        .write_image(
            rgb.as_raw(),
            rgb.width(),
            rgb.height(),
            image::ExtendedColorType::Rgb8,
        )
        .map_err(|e| codec("the image cannot be encoded", &e))?;
    Ok(out)
}

fn encode_png(img: &DynamicImage) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let encoder =
        PngEncoder::new_with_quality(&mut out, CompressionType::Fast, PngFilter::Adaptive);
    img.write_with_encoder(encoder)
        .map_err(|e| codec("the image cannot be encoded", &e))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{Rgb, Rgba, RgbaImage};

    fn jpeg(w: u32, h: u32) -> Vec<u8> {
        let img = RgbImage::from_fn(w, h, |x, y| Rgb([(x % 256) as u8, (y % 256) as u8, 90]));
        encode_jpeg(&img, 90).unwrap()
    }

    fn png(w: u32, h: u32, alpha: bool) -> Vec<u8> {
        let img = if alpha {
            DynamicImage::ImageRgba8(RgbaImage::from_pixel(w, h, Rgba([0, 0, 0, 0])))
        } else {
            DynamicImage::ImageRgb8(RgbImage::from_pixel(w, h, Rgb([10, 20, 30])))
        };
        encode_png(&img).unwrap()
    }

    #[test]
    fn small_images_pass_unchanged() {
        let data = jpeg(64, 48);
        let out = fit_image(&data, 1568, 1 << 20).unwrap();
        assert_eq!(out.data, data);
        assert_eq!(
            (out.mime, out.width, out.height, out.resized),
            ("image/jpeg", 64, 48, false)
        );
    }

    #[test]
    fn large_images_shrink_to_the_longest_side() {
        let out = fit_image(&jpeg(2000, 1000), 500, 1 << 20).unwrap();
        assert_eq!((out.width, out.height, out.resized), (500, 250, true));
        let back = image::load_from_memory(&out.data).unwrap();
        assert_eq!((back.width(), back.height()), (500, 250));
    }

    #[test]
    fn png_stays_png_and_transparency_is_kept_when_it_fits() {
        let out = fit_image(&png(1200, 300, true), 600, 1 << 20).unwrap();
        assert_eq!((out.mime, out.width, out.height), ("image/png", 600, 150));
    }

    #[test]
    fn too_many_bytes_are_compressed_harder() {
        let data = jpeg(400, 400);
        let out = fit_image(&data, 1568, data.len() - 1).unwrap();
        assert!(out.resized && out.data.len() < data.len());
    }

    #[test]
    fn a_photo_taken_sideways_is_turned_upright() {
        // 64x32 pixels stored, EXIF orientation 6: a blue stripe on the left edge
        // of the stored pixels is at the top once turned 90 degrees clockwise.
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/images/sideways_exif6.jpg"
        );
        let data = std::fs::read(path).unwrap();
        let out = fit_image(&data, 1568, 1 << 20).unwrap();
        assert_eq!((out.width, out.height, out.resized), (32, 64, true));
        let img = image::load_from_memory(&out.data).unwrap().into_rgb8();
        let top = img.get_pixel(16, 4).0;
        let bottom = img.get_pixel(16, 60).0;
        assert!(top[2] > 150 && top[0] < 100, "{top:?}");
        assert!(bottom[0] > 150 && bottom[2] < 100, "{bottom:?}");
    }

    #[test]
    fn refusals_say_why() {
        let err = fit_image(b"GIF89a....", 100, 100).unwrap_err().to_string();
        assert!(err.contains("image/gif"), "{err}");
        let err = fit_image(b"hello", 100, 100).unwrap_err().to_string();
        assert!(err.contains("not an image"), "{err}");
        let err = fit_image(b"\xff\xd8\xff\xe0garbage", 100, 100)
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot be"), "{err}");
        let webp = b"RIFF\x10\0\0\0WEBPVP8 ".to_vec();
        assert_eq!(fit_image(&webp, 100, 100).unwrap().mime, "image/webp");
        assert!(fit_image(&webp, 100, 4).is_err());
    }
}
