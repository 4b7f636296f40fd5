#include "jit/cubin_info.hpp"

#include <elf.h>

#include <cstring>

namespace kjit::jit {

namespace {

// Bounds-checked reads of a 64-bit ELF image's section headers and string tables; `ok` is false
// when the image is not one (or its section-name table is out of range).
struct ElfView {
  const std::string& image;
  Elf64_Ehdr eh{};
  Elf64_Shdr strtab{};
  bool ok = false;

  explicit ElfView(const std::string& cubin) : image(cubin) {
    if (image.size() < sizeof(Elf64_Ehdr)) return;
    std::memcpy(&eh, image.data(), sizeof eh);
    if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_shentsize != sizeof(Elf64_Shdr)) {
      return;
    }
    ok = eh.e_shstrndx < eh.e_shnum && section(eh.e_shstrndx, &strtab);
  }
  size_t sections() const { return ok ? eh.e_shnum : 0; }
  bool section(size_t i, Elf64_Shdr* out) const {
    const size_t off = eh.e_shoff + i * sizeof(Elf64_Shdr);
    if (off + sizeof(Elf64_Shdr) > image.size()) return false;
    std::memcpy(out, image.data() + off, sizeof(Elf64_Shdr));
    return true;
  }
  // Whether the section's bytes lie inside the image.
  bool in_image(const Elf64_Shdr& sh) const { return sh.sh_offset + sh.sh_size <= image.size(); }
  // The NUL-terminated name at `off` of string table `table` (empty when out of range).
  std::string name_at(const Elf64_Shdr& table, uint32_t off) const {
    if (off >= table.sh_size || !in_image(table)) return {};
    const char* p = image.data() + table.sh_offset + off;
    return std::string(p, strnlen(p, table.sh_size - off));
  }
  std::string section_name(const Elf64_Shdr& sh) const { return name_at(strtab, sh.sh_name); }
};

}  // namespace

CubinKernelInfo cubin_kernel_info(const std::string& cubin, const std::string& lowered_name) {
  CubinKernelInfo info;
  const ElfView elf(cubin);
  if (!elf.ok) return info;
  const std::string shared_name = ".nv.shared." + lowered_name;
  long sym_index = -1;
  Elf64_Shdr nv_info{};
  bool have_info = false;
  for (size_t i = 0; i < elf.sections(); ++i) {
    Elf64_Shdr sh;
    if (!elf.section(i, &sh)) continue;
    std::string n = elf.section_name(sh);
    if (n == shared_name) {
      info.shared_bytes = static_cast<int>(sh.sh_size);
    } else if (n == ".nv.info") {
      nv_info = sh;
      have_info = true;
    } else if (sh.sh_type == SHT_SYMTAB && sh.sh_entsize == sizeof(Elf64_Sym)) {
      Elf64_Shdr names;
      if (!elf.section(sh.sh_link, &names) || !elf.in_image(sh)) continue;
      for (size_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym); ++k) {
        Elf64_Sym sym;
        std::memcpy(&sym, cubin.data() + sh.sh_offset + k * sizeof(Elf64_Sym), sizeof sym);
        if (elf.name_at(names, sym.st_name) == lowered_name) sym_index = static_cast<long>(k);
      }
    }
  }
  if (sym_index < 0) return info;
  if (info.shared_bytes < 0) info.shared_bytes = 0;
  // .nv.info is a list of {u8 format, u8 attribute, u16 size, payload}; the register count is
  // attribute 0x2f (EIATTR_REGCOUNT) with payload {u32 symbol index, u32 registers}.
  if (have_info && elf.in_image(nv_info)) {
    const unsigned char* p =
        reinterpret_cast<const unsigned char*>(cubin.data()) + nv_info.sh_offset;
    size_t off = 0;
    while (off + 4 <= nv_info.sh_size) {
      unsigned fmt = p[off], attr = p[off + 1];
      unsigned size = p[off + 2] | (p[off + 3] << 8);
      if (fmt != 0x04) {  // not a sized record: two bytes of inline value follow the header
        off += 4;
        continue;
      }
      if (off + 4 + size > nv_info.sh_size) break;
      if (attr == 0x2f && size == 8) {
        uint32_t sym, regs;
        std::memcpy(&sym, p + off + 4, 4);
        std::memcpy(&regs, p + off + 8, 4);
        if (static_cast<long>(sym) == sym_index) info.registers = static_cast<int>(regs);
      }
      off += 4 + size;
    }
  }
  return info;
}

std::string cubin_kernel_code(const std::string& cubin, const std::string& lowered_name) {
  const ElfView elf(cubin);
  const std::string want = ".text." + lowered_name;
  for (size_t i = 0; i < elf.sections(); ++i) {
    Elf64_Shdr sh;
    if (!elf.section(i, &sh) || elf.section_name(sh) != want) continue;
    if (!elf.in_image(sh)) return {};
    return cubin.substr(sh.sh_offset, sh.sh_size);
  }
  return {};
}

}  // namespace kjit::jit
