//! fs natives: thin bindings of [`crate::fsops::FsOps`]; paths arrive as
//! strings (the JS side turns `Buffer`/`URL` paths into strings first).

use std::rc::Rc;

use agentcomputer_fs::{FileKind, WriteMode};
use rquickjs::function::Opt;
use rquickjs::{Ctx, Object, Result, TypedArray, Value};

use super::{set_fn, throw_sys, type_error, u8_array, with_bytes};
use crate::fsops::OpenFlags;
use crate::state::ExecState;
use crate::vfs::Node;

/// `st_blksize` reported by `stat` (the engine's I/O unit is larger, but
/// 4096 is what tools expect).
const BLKSIZE: f64 = 4096.0;

/// libuv's `UV_DIRENT_*` codes, which Node's `Dirent` decodes.
fn dirent_type(kind: FileKind) -> i32 {
    match kind {
        FileKind::RegularFile => 1,
        FileKind::Directory => 2,
        FileKind::Symlink => 3,
        FileKind::NamedPipe => 4,
        FileKind::Socket => 5,
        FileKind::CharDevice => 6,
        FileKind::BlockDevice => 7,
    }
}

/// `[dev, ino, mode, nlink, uid, gid, rdev, size, blksize, blocks,
/// atimeMs, mtimeMs, ctimeMs, birthtimeMs]`, the fields of Node's `Stats`.
fn stat_array(n: &Node) -> Vec<f64> {
    let a = &n.attr;
    let ms = |t: agentcomputer_fs::Timespec| t.sec as f64 * 1e3 + t.nsec as f64 / 1e6;
    vec![
        n.mount.map(|m| m.dev()).unwrap_or(0) as f64,
        a.ino as f64,
        a.mode() as f64,
        a.nlink as f64,
        a.uid as f64,
        a.gid as f64,
        a.rdev as f64,
        a.size as f64,
        BLKSIZE,
        a.blocks as f64,
        ms(a.atime),
        ms(a.mtime),
        ms(a.ctime),
        ms(a.ctime),
    ]
}

fn write_mode(ctx: &Ctx<'_>, flag: &str) -> Result<WriteMode> {
    Ok(match flag {
        "w" | "w+" => WriteMode::Truncate,
        "a" | "a+" | "as" | "as+" => WriteMode::Append,
        "wx" | "xw" | "wx+" | "xw+" | "ax" | "xa" => WriteMode::CreateNew,
        other => {
            return Err(type_error(
                ctx,
                &format!("unsupported flag '{other}' for writeFile"),
            ));
        }
    })
}

fn open_flags<'js>(ctx: &Ctx<'js>, flags: &Value<'js>) -> Result<OpenFlags> {
    if let Some(n) = flags.as_int() {
        return Ok(OpenFlags::from_bits(n));
    }
    if let Some(s) = flags.as_string() {
        let s = s.to_string()?;
        return OpenFlags::parse(&s)
            .ok_or_else(|| type_error(ctx, &format!("invalid file system flag '{s}'")));
    }
    Ok(OpenFlags::parse("r").unwrap_or_default())
}

fn position(p: Opt<Value<'_>>) -> Option<u64> {
    p.0.and_then(|v| v.as_number())
        .filter(|n| *n >= 0.0)
        .map(|n| n as u64)
}

pub(super) fn install<'js>(obj: &Object<'js>, st: &Rc<ExecState>) -> Result<()> {
    let s = st.clone();
    set_fn(
        obj,
        "stat",
        move |ctx: Ctx<'js>, path: String, follow: bool| {
            s.ops
                .stat(&path, follow)
                .map(|n| stat_array(&n))
                .map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(obj, "fstat", move |ctx: Ctx<'js>, fd: i32| {
        s.ops
            .fstat(fd)
            .map(|n| stat_array(&n))
            .map_err(|e| throw_sys(&ctx, e))
    })?;
    let s = st.clone();
    set_fn(
        obj,
        "readFile",
        move |ctx: Ctx<'js>, path: String, utf8: bool| -> Result<Value<'js>> {
            let data = s
                .ops
                .read_file(&path, s.memory_limit as u64)
                .map_err(|e| throw_sys(&ctx, e))?;
            if utf8 {
                let text = match String::from_utf8(data) {
                    Ok(t) => t,
                    Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
                };
                Ok(rquickjs::String::from_str(ctx, &text)?.into_value())
            } else {
                u8_array(&ctx, data)
            }
        },
    )?;
    let s = st.clone();
    set_fn(
        obj,
        "writeFile",
        move |ctx: Ctx<'js>, path: String, data: Value<'js>, flag: String, mode: u32| {
            let wm = write_mode(&ctx, &flag)?;
            with_bytes(&ctx, &data, |b| s.ops.write_file(&path, b, wm, mode))?
                .map(|_| ())
                .map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(
        obj,
        "mkdir",
        move |ctx: Ctx<'js>, path: String, mode: u32, recursive: bool| {
            s.ops
                .mkdir(&path, mode, recursive)
                .map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(
        obj,
        "readdir",
        move |ctx: Ctx<'js>, path: String| -> Result<rquickjs::Array<'js>> {
            // [name, type, name, type, ...]
            let entries = s.ops.readdir(&path).map_err(|e| throw_sys(&ctx, e))?;
            let arr = rquickjs::Array::new(ctx.clone())?;
            for (i, (n, k)) in entries.into_iter().enumerate() {
                arr.set(2 * i, String::from_utf8_lossy(&n).into_owned())?;
                arr.set(2 * i + 1, dirent_type(k))?;
            }
            Ok(arr)
        },
    )?;
    let s = st.clone();
    set_fn(obj, "unlink", move |ctx: Ctx<'js>, path: String| {
        s.ops.unlink(&path).map_err(|e| throw_sys(&ctx, e))
    })?;
    let s = st.clone();
    set_fn(obj, "rmdir", move |ctx: Ctx<'js>, path: String| {
        s.ops.rmdir(&path).map_err(|e| throw_sys(&ctx, e))
    })?;
    let s = st.clone();
    set_fn(
        obj,
        "rm",
        move |ctx: Ctx<'js>, path: String, recursive: bool, force: bool| {
            s.ops
                .rm(&path, recursive, force)
                .map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(
        obj,
        "rename",
        move |ctx: Ctx<'js>, from: String, to: String| {
            s.ops.rename(&from, &to).map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(
        obj,
        "copyFile",
        move |ctx: Ctx<'js>, from: String, to: String, excl: bool| {
            let stop = || s.stop.reason().is_some();
            s.ops
                .copy_file(&from, &to, excl, &stop)
                .map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(
        obj,
        "symlink",
        move |ctx: Ctx<'js>, target: String, path: String| {
            s.ops
                .symlink(&target, &path)
                .map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(obj, "readlink", move |ctx: Ctx<'js>, path: String| {
        s.ops
            .readlink(&path)
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .map_err(|e| throw_sys(&ctx, e))
    })?;
    let s = st.clone();
    set_fn(
        obj,
        "link",
        move |ctx: Ctx<'js>, existing: String, new: String| {
            s.ops.link(&existing, &new).map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(
        obj,
        "chmod",
        move |ctx: Ctx<'js>, path: String, mode: u32| {
            s.ops.chmod(&path, mode).map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(
        obj,
        "utimes",
        move |ctx: Ctx<'js>, path: String, atime: f64, mtime: f64, follow: bool| {
            s.ops
                .utimes(&path, atime, mtime, follow)
                .map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(
        obj,
        "truncate",
        move |ctx: Ctx<'js>, path: String, len: f64| {
            s.ops
                .truncate(&path, len.max(0.0) as u64)
                .map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(
        obj,
        "access",
        move |ctx: Ctx<'js>, path: String, mode: u32| {
            s.ops.access(&path, mode).map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(obj, "realpath", move |ctx: Ctx<'js>, path: String| {
        s.ops.realpath(&path).map_err(|e| throw_sys(&ctx, e))
    })?;
    let s = st.clone();
    set_fn(obj, "mkdtemp", move |ctx: Ctx<'js>, prefix: String| {
        s.ops.mkdtemp(&prefix).map_err(|e| throw_sys(&ctx, e))
    })?;
    let s = st.clone();
    set_fn(
        obj,
        "open",
        move |ctx: Ctx<'js>, path: String, flags: Value<'js>, mode: u32| {
            let flags = open_flags(&ctx, &flags)?;
            s.ops
                .open(&path, flags, mode)
                .map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(obj, "close", move |ctx: Ctx<'js>, fd: i32| {
        s.ops.close(fd).map_err(|e| throw_sys(&ctx, e))
    })?;
    let s = st.clone();
    // read(fd, target Uint8Array, offset, length, position|null) -> bytes read
    set_fn(
        obj,
        "read",
        move |ctx: Ctx<'js>,
              fd: i32,
              target: TypedArray<'js, u8>,
              offset: usize,
              len: usize,
              pos: Opt<Value<'js>>| {
            let total = target.len();
            if offset > total {
                return Err(type_error(&ctx, "offset is out of bounds"));
            }
            let len = len.min(total - offset);
            let data = s
                .ops
                .read(fd, len, position(pos))
                .map_err(|e| throw_sys(&ctx, e))?;
            let raw = target
                .as_raw()
                .ok_or_else(|| type_error(&ctx, "the buffer is detached"))?;
            // SAFETY: `raw` is the live backing store of `target` (length
            // `total`); the copy stays within `offset..offset + len`.
            unsafe {
                let dst = raw.as_ptr() as *mut u8;
                std::ptr::copy_nonoverlapping(data.as_ptr(), dst.add(offset), data.len());
            }
            Ok(data.len())
        },
    )?;
    let s = st.clone();
    set_fn(
        obj,
        "write",
        move |ctx: Ctx<'js>, fd: i32, data: Value<'js>, pos: Opt<Value<'js>>| {
            let pos = position(pos);
            with_bytes(&ctx, &data, |b| s.ops.write(fd, b, pos))?.map_err(|e| throw_sys(&ctx, e))
        },
    )?;
    let s = st.clone();
    set_fn(obj, "ftruncate", move |ctx: Ctx<'js>, fd: i32, len: f64| {
        s.ops
            .ftruncate(fd, len.max(0.0) as u64)
            .map_err(|e| throw_sys(&ctx, e))
    })?;
    let s = st.clone();
    set_fn(obj, "fsync", move |ctx: Ctx<'js>, fd: i32| {
        s.ops.fsync(fd).map_err(|e| throw_sys(&ctx, e))
    })?;
    Ok(())
}
