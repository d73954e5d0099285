# header_lengths.awk — prints "LINES FILE" for each file's opening header: a /* */ block (C, C++,
# CUDA), the # lines after a shebang (shell), or a """ docstring after them (Python; the shebang
# not counted). A file without one prints 0. test/test_form.sh uses it.
FNR == 1 { kind = ""; n = 0; done = 0 }
done { next }
FNR == 1 && /^\/\*/ { kind = "c" }
FNR == 1 && /^#!/ { next }
kind == "c" { n++; if (/\*\//) { print n, FILENAME; done = 1 }; next }
kind == "py" { n++; if (/"""/) { print n, FILENAME; done = 1 }; next }
/^#/ { n++; next }
/^r?"""/ && n == 0 { kind = "py"; n = 1; if (gsub(/"""/, "&") == 2) { print n, FILENAME; done = 1 }; next }
{ print n, FILENAME; done = 1 }
