//! The file layout of an ELF object as plain numbers: the ELF header fields
//! that hold file offsets, every program header and every section header.
//!
//! Parsing is done by the `object` crate; this module only copies what
//! `check` and `align` need into a model that is the same for ELF32 and ELF64,
//! and validates it against the file size so later code can do arithmetic
//! without overflow or out-of-bounds reads.

use object::elf;
use object::read::elf::{Dyn, FileHeader, ProgramHeader, SectionHeader};
use object::{Endianness, ReadRef};

/// One program header, widened to 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phdr {
    pub p_type: u32,
    pub p_flags: u32,
    pub p_offset: u64,
    pub p_vaddr: u64,
    pub p_paddr: u64,
    pub p_filesz: u64,
    pub p_memsz: u64,
    pub p_align: u64,
}

impl Phdr {
    /// `PT_LOAD`?
    pub fn is_load(&self) -> bool {
        self.p_type == elf::PT_LOAD
    }
    /// Writable (`PF_W`)?
    pub fn writable(&self) -> bool {
        self.p_flags & elf::PF_W != 0
    }
    /// Executable (`PF_X`)?
    pub fn executable(&self) -> bool {
        self.p_flags & elf::PF_X != 0
    }
    /// End of the file bytes (`p_offset + p_filesz`); validated not to overflow.
    pub fn file_end(&self) -> u64 {
        self.p_offset + self.p_filesz
    }
    /// Flags as `readelf` shows them ("R E", "RW ").
    pub fn flags_str(&self) -> String {
        flags_str(self.p_flags)
    }
}

/// Render `p_flags` the way `readelf -l` does.
pub fn flags_str(f: u32) -> String {
    let mut s = String::with_capacity(3);
    s.push(if f & elf::PF_R != 0 { 'R' } else { ' ' });
    s.push(if f & elf::PF_W != 0 { 'W' } else { ' ' });
    s.push(if f & elf::PF_X != 0 { 'E' } else { ' ' });
    s
}

/// One section header, widened to 64 bits, with its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shdr {
    pub name: String,
    pub sh_type: u32,
    pub sh_flags: u64,
    pub sh_addr: u64,
    pub sh_offset: u64,
    pub sh_size: u64,
}

impl Shdr {
    /// Does the section occupy bytes in the file?
    pub fn has_file_bytes(&self) -> bool {
        self.sh_type != elf::SHT_NOBITS && self.sh_type != elf::SHT_NULL && self.sh_size > 0
    }
    /// `SHF_ALLOC`?
    pub fn alloc(&self) -> bool {
        self.sh_flags & u64::from(elf::SHF_ALLOC) != 0
    }
}

/// Everything about an ELF file's layout that `check` and `align` use.
#[derive(Debug, Clone)]
pub struct Model {
    pub is_64: bool,
    pub little_endian: bool,
    pub e_type: u16,
    pub e_machine: u16,
    pub e_phoff: u64,
    pub e_shoff: u64,
    pub e_phentsize: u64,
    pub e_shentsize: u64,
    pub phdrs: Vec<Phdr>,
    /// Section headers, index 0 included. Empty if the file has none.
    pub shdrs: Vec<Shdr>,
    /// `DT_FLAGS_1` from the dynamic section, if any.
    pub dt_flags_1: u64,
    /// Has a `DT_SONAME` (a shared library, even when it also has PT_INTERP).
    pub has_soname: bool,
    /// `PT_INTERP` contents, if any.
    pub interp: Option<String>,
    pub file_size: u64,
}

/// A file that is not a well-formed ELF file, phrased for the user (the
/// caller adds the path: [`crate::Error::Elf`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

/// Parse results.
pub type ParseResult<T> = std::result::Result<T, Malformed>;

const MAX_PHDRS: usize = 4096;
/// Index of the class byte in `e_ident`.
pub(crate) const EI_CLASS: usize = 4;

impl Model {
    /// Parse an ELF file's headers from `data` (a byte slice or a `ReadCache`).
    pub fn parse<'data, R: ReadRef<'data>>(data: R) -> ParseResult<Model> {
        match elf_class(data)? {
            true => parse_generic::<elf::FileHeader64<Endianness>, R>(data, true),
            false => parse_generic::<elf::FileHeader32<Endianness>, R>(data, false),
        }
    }

    /// The `PT_LOAD` headers, in program-header order.
    pub fn loads(&self) -> impl Iterator<Item = (usize, &Phdr)> {
        self.phdrs.iter().enumerate().filter(|(_, p)| p.is_load())
    }

    /// Largest power-of-two `p_align` among the PT_LOADs (what the kernel and
    /// glibc ≥ 2.35 align an ET_DYN's load base to), at least 1.
    pub fn max_load_align(&self) -> u64 {
        self.loads()
            .map(|(_, p)| p.p_align)
            .filter(|a| a.is_power_of_two())
            .max()
            .unwrap_or(1)
    }

    /// Size of the program header table in the file.
    pub fn phdr_table_size(&self) -> u64 {
        self.e_phentsize * self.phdrs.len() as u64
    }

    /// Size of the section header table in the file.
    pub fn shdr_table_size(&self) -> u64 {
        self.e_shentsize * self.shdrs.len() as u64
    }

    /// `DF_1_PIE` set in `DT_FLAGS_1`?
    pub fn is_pie_flagged(&self) -> bool {
        self.dt_flags_1 & u64::from(elf::DF_1_PIE) != 0
    }

    /// End of the last byte the ELF structures describe: headers, tables,
    /// segments, sections. Anything past it was appended to the file.
    pub fn described_end(&self) -> u64 {
        let ehsize = if self.is_64 { 64 } else { 52 };
        let mut end = ehsize;
        if !self.phdrs.is_empty() {
            end = end.max(self.e_phoff + self.phdr_table_size());
        }
        if !self.shdrs.is_empty() {
            end = end.max(self.e_shoff + self.shdr_table_size());
        }
        for p in &self.phdrs {
            end = end.max(p.file_end());
        }
        for s in self.shdrs.iter().filter(|s| s.has_file_bytes()) {
            end = end.max(s.sh_offset + s.sh_size);
        }
        end
    }
}

/// Check the ELF magic of `data` and return its class: 64-bit or not. The
/// one way into an ELF file for the layout model and the dependency reader.
pub(crate) fn elf_class<'data, R: ReadRef<'data>>(data: R) -> ParseResult<bool> {
    let ident = data
        .read_bytes_at(0, 16)
        .map_err(|_| Malformed("not an ELF file (shorter than an ELF identification)".to_string()))?;
    if &ident[..4] != b"\x7fELF" {
        return Err(Malformed("not an ELF file (no ELF magic)".into()));
    }
    match ident[EI_CLASS] {
        elf::ELFCLASS64 => Ok(true),
        elf::ELFCLASS32 => Ok(false),
        c => Err(Malformed(format!("not a valid ELF file (unknown ELF class {c})"))),
    }
}

/// The `(tag, value)` entries of the dynamic section that program header
/// `p` describes, up to `DT_NULL`; `None` when it describes none.
pub(crate) fn dynamic_entries<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(
    p: &Elf::ProgramHeader,
    endian: Endianness,
    data: R,
) -> Option<Vec<(u64, u64)>> {
    let dynamic = p.dynamic(endian, data).ok()??;
    Some(
        dynamic
            .iter()
            .map(|d| (d.d_tag(endian).into(), d.d_val(endian).into()))
            .take_while(|&(tag, _)| tag != u64::from(elf::DT_NULL))
            .collect(),
    )
}

fn parse_generic<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(
    data: R,
    is_64: bool,
) -> ParseResult<Model> {
    let file_size = data
        .len()
        .map_err(|_| Malformed("cannot determine the file size".to_string()))?;
    let header = Elf::parse(data).map_err(|e| Malformed(format!("not a valid ELF file ({e})")))?;
    let endian = header
        .endian()
        .map_err(|e| Malformed(format!("not a valid ELF file ({e})")))?;
    let little_endian = endian == Endianness::Little;
    let e_type = header.e_type(endian);
    let e_machine = header.e_machine(endian);
    let e_phoff: u64 = header.e_phoff(endian).into();
    let e_shoff: u64 = header.e_shoff(endian).into();
    let e_phentsize = u64::from(header.e_phentsize(endian));
    let e_shentsize = u64::from(header.e_shentsize(endian));

    // Say "truncated" when the tables lie past the end, before object's
    // generic messages would.
    let phnum = u64::from(header.e_phnum(endian));
    if phnum > 0 && phnum != u64::from(elf::PN_XNUM) && e_phoff.saturating_add(phnum * e_phentsize) > file_size {
        return Err(Malformed(format!(
            "the program header table ({phnum} entries at {e_phoff:#x}) lies beyond the end of the file ({file_size:#x} bytes): truncated or corrupt"
        )));
    }
    let shnum = u64::from(header.e_shnum(endian));
    if e_shoff != 0 && shnum > 0 && e_shoff.saturating_add(shnum * e_shentsize) > file_size {
        return Err(Malformed(format!(
            "the section header table ({shnum} entries at {e_shoff:#x}) lies beyond the end of the file ({file_size:#x} bytes): truncated or corrupt"
        )));
    }
    let raw_phdrs = header
        .program_headers(endian, data)
        .map_err(|e| Malformed(format!("malformed program header table ({e})")))?;
    if raw_phdrs.len() > MAX_PHDRS {
        return Err(Malformed(format!("absurd program header count {}", raw_phdrs.len())));
    }
    let mut phdrs = Vec::with_capacity(raw_phdrs.len());
    for (i, p) in raw_phdrs.iter().enumerate() {
        let ph = Phdr {
            p_type: p.p_type(endian),
            p_flags: p.p_flags(endian),
            p_offset: p.p_offset(endian).into(),
            p_vaddr: p.p_vaddr(endian).into(),
            p_paddr: p.p_paddr(endian).into(),
            p_filesz: p.p_filesz(endian).into(),
            p_memsz: p.p_memsz(endian).into(),
            p_align: p.p_align(endian).into(),
        };
        // Only file-backed headers are checked against the file; GNU_STACK and
        // friends carry zeros.
        let end = ph.p_offset.checked_add(ph.p_filesz);
        match end {
            Some(end) if end <= file_size => {}
            _ if ph.p_filesz == 0 && ph.p_offset <= file_size => {}
            _ => {
                return Err(Malformed(format!(
                    "program header {i} ({}) describes bytes {:#x}+{:#x} beyond the end of the file ({:#x} bytes): truncated or corrupt",
                    ptype_name(ph.p_type),
                    ph.p_offset,
                    ph.p_filesz,
                    file_size
                )))
            }
        }
        if ph.is_load() {
            if let Some(why) = load_refusal(&ph) {
                return Err(Malformed(format!("PT_LOAD {i} {why}: corrupt")));
            }
        }
        phdrs.push(ph);
    }

    let mut shdrs = Vec::new();
    if e_shoff != 0 {
        let sections = header
            .sections(endian, data)
            .map_err(|e| Malformed(format!("malformed section header table ({e})")))?;
        for (i, s) in sections.iter().enumerate() {
            let name = sections
                .section_name(endian, s)
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .unwrap_or_default();
            let sh = Shdr {
                name,
                sh_type: s.sh_type(endian),
                sh_flags: s.sh_flags(endian).into(),
                sh_addr: s.sh_addr(endian).into(),
                sh_offset: s.sh_offset(endian).into(),
                sh_size: s.sh_size(endian).into(),
            };
            if sh.has_file_bytes() && sh.sh_offset.checked_add(sh.sh_size).map_or(true, |e| e > file_size) {
                return Err(Malformed(format!(
                    "section {i} ({}) describes bytes {:#x}+{:#x} beyond the end of the file ({:#x} bytes): truncated or corrupt",
                    sh.name, sh.sh_offset, sh.sh_size, file_size
                )));
            }
            shdrs.push(sh);
        }
    }

    let mut dt_flags_1 = 0;
    let mut has_soname = false;
    let mut interp = None;
    for p in raw_phdrs {
        for (tag, val) in dynamic_entries::<Elf, R>(p, endian, data).unwrap_or_default() {
            if tag == u64::from(elf::DT_SONAME) {
                has_soname = true;
            }
            if tag == u64::from(elf::DT_FLAGS_1) {
                dt_flags_1 = val;
            }
        }
        if let Ok(Some(i)) = p.interpreter(endian, data) {
            interp = Some(String::from_utf8_lossy(i).into_owned());
        }
    }

    Ok(Model {
        is_64,
        little_endian,
        e_type,
        e_machine,
        e_phoff,
        e_shoff,
        e_phentsize,
        e_shentsize,
        phdrs,
        shdrs,
        dt_flags_1,
        has_soname,
        interp,
        file_size,
    })
}

/// What is wrong with a PT_LOAD's extent, in words that follow "PT_LOAD N":
/// its memory end wraps past the top of the address space, or its memory
/// size is smaller than its file size. `None` when neither.
fn load_refusal(p: &Phdr) -> Option<String> {
    if p.p_vaddr.checked_add(p.p_memsz).is_none() {
        Some(format!(
            "ends past the top of the address space (vaddr {:#x} + memsz {:#x} wraps around)",
            p.p_vaddr, p.p_memsz
        ))
    } else if p.p_memsz < p.p_filesz {
        Some(format!(
            "has a memory size ({:#x}) smaller than its file size ({:#x})",
            p.p_memsz, p.p_filesz
        ))
    } else {
        None
    }
}

/// Name of a program header type, as `readelf` prints it.
pub fn ptype_name(t: u32) -> String {
    match t {
        elf::PT_NULL => "NULL".into(),
        elf::PT_LOAD => "LOAD".into(),
        elf::PT_DYNAMIC => "DYNAMIC".into(),
        elf::PT_INTERP => "INTERP".into(),
        elf::PT_NOTE => "NOTE".into(),
        elf::PT_SHLIB => "SHLIB".into(),
        elf::PT_PHDR => "PHDR".into(),
        elf::PT_TLS => "TLS".into(),
        elf::PT_GNU_EH_FRAME => "GNU_EH_FRAME".into(),
        elf::PT_GNU_STACK => "GNU_STACK".into(),
        elf::PT_GNU_RELRO => "GNU_RELRO".into(),
        elf::PT_GNU_PROPERTY => "GNU_PROPERTY".into(),
        other => format!("{other:#x}"),
    }
}

/// Name of an `e_machine` value for messages.
pub fn machine_name(m: u16) -> String {
    match m {
        elf::EM_X86_64 => "x86-64".into(),
        elf::EM_386 => "i386".into(),
        elf::EM_AARCH64 => "AArch64".into(),
        elf::EM_ARM => "ARM".into(),
        elf::EM_RISCV => "RISC-V".into(),
        elf::EM_PPC64 => "PowerPC64".into(),
        elf::EM_S390 => "s390".into(),
        elf::EM_BPF => "BPF".into(),
        elf::EM_NONE => "none".into(),
        other => format!("machine {other}"),
    }
}
