package podrun

import "strings"

// SetINI returns the INI text conf with keys set: each key of set is "section.key"; an existing key of that section
// is replaced (its first occurrence), else it is added at the end of its section, and a missing section is added at
// the end. The rest of conf is kept as written (an admin editing the ConfigMap's ovnkube.conf).
func SetINI(conf string, set map[string]string) string {
	lines := strings.Split(strings.TrimRight(conf, "\n"), "\n")
	for sk, val := range set {
		section, key, _ := strings.Cut(sk, ".")
		cur, end, done := "", -1, false
		for i, l := range lines {
			t := strings.TrimSpace(l)
			if strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]") {
				cur = strings.ToLower(strings.Trim(t, "[]"))
				continue
			}
			if cur != section {
				continue
			}
			end = i
			if k, _, ok := strings.Cut(t, "="); ok && strings.TrimSpace(k) == key {
				lines[i] = key + " = " + val
				done = true
				break
			}
		}
		switch {
		case done:
		case end >= 0:
			lines = append(lines[:end+1], append([]string{key + " = " + val}, lines[end+1:]...)...)
		default:
			sectionAt := -1
			for i, l := range lines {
				if strings.ToLower(strings.TrimSpace(l)) == "["+section+"]" {
					sectionAt = i
				}
			}
			if sectionAt >= 0 {
				lines = append(lines[:sectionAt+1], append([]string{key + " = " + val}, lines[sectionAt+1:]...)...)
			} else {
				lines = append(lines, "", "["+section+"]", key+" = "+val)
			}
		}
	}
	return strings.Join(lines, "\n") + "\n"
}
