# function_lengths.awk — prints each function at column 0 longer than max lines (awk -v max=N): from its
# first line (a template line included) to the first "}" at column 0. test/test_form.sh uses it.
/^\/\*/ { incomment = 1 }
incomment { if (/\*\//) incomment = 0; next }
/^[A-Za-z_]/ && !/^(struct|enum|namespace|union|class|typedef|using|static_assert|extern)\b/ && !/^template[^(]*\b(struct|class [A-Za-z_]+ *\{|using)\b/ && !/;[ \t]*(\/\/.*)?$/ && start == 0 { start = FNR; name = $0 }
/^}/ && start { n = FNR - start + 1; if (n > max) printf "%s:%d %d lines: %s\n", FILENAME, start, n, substr(name, 1, 70); start = 0 }
