package inject

import (
	corev1 "k8s.io/api/core/v1"
)

func findContainer(name string, cs []corev1.Container) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// findContainerInPod looks in containers, then init containers.
func findContainerInPod(name string, pod *corev1.Pod) *corev1.Container {
	if c := findContainer(name, pod.Spec.Containers); c != nil {
		return c
	}
	return findContainer(name, pod.Spec.InitContainers)
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func removeContainer(cs []corev1.Container, name string) []corev1.Container {
	out := make([]corev1.Container, 0, len(cs))
	for _, c := range cs {
		if c.Name != name {
			out = append(out, c)
		}
	}
	return out
}

// moveFirst and moveLast return cs with container name moved; cs unchanged
// when name is absent.
func moveFirst(cs []corev1.Container, name string) []corev1.Container {
	c := findContainer(name, cs)
	if c == nil {
		return cs
	}
	return append([]corev1.Container{*c}, removeContainer(cs, name)...)
}

func moveLast(cs []corev1.Container, name string) []corev1.Container {
	c := findContainer(name, cs)
	if c == nil {
		return cs
	}
	m := *c
	return append(removeContainer(cs, name), m)
}

// moveContainer moves container name from one list to the end of another.
func moveContainer(from, to []corev1.Container, name string) ([]corev1.Container, []corev1.Container) {
	c := findContainer(name, from)
	if c == nil {
		return from, to
	}
	m := *c
	return removeContainer(from, name), append(to, m)
}

// removeNamed returns cs without the containers named in names, in one
// pass (names come from the pod's status annotation: any number of them).
func removeNamed(cs []corev1.Container, names []string) []corev1.Container {
	if len(names) == 0 {
		return cs
	}
	drop := make(map[string]bool, len(names))
	for _, n := range names {
		drop[n] = true
	}
	out := make([]corev1.Container, 0, len(cs))
	for _, c := range cs {
		if !drop[c.Name] {
			out = append(out, c)
		}
	}
	return out
}

// orderFirst puts the containers named in front first, in that order,
// then the others in their order, in one pass. As with moveFirst, a moved
// name keeps its first container only; a name repeated in front counts at
// its first place; absent names are skipped.
func orderFirst(cs []corev1.Container, front []string) []corev1.Container {
	pos := make(map[string]int, len(front))
	for _, n := range front {
		if _, ok := pos[n]; !ok {
			pos[n] = len(pos)
		}
	}
	slots := make([]*corev1.Container, len(pos))
	rest := make([]corev1.Container, 0, len(cs))
	for i := range cs {
		p, moved := pos[cs[i].Name]
		switch {
		case !moved:
			rest = append(rest, cs[i])
		case slots[p] == nil:
			slots[p] = &cs[i]
		}
	}
	out := make([]corev1.Container, 0, len(cs))
	for _, c := range slots {
		if c != nil {
			out = append(out, *c)
		}
	}
	return append(out, rest...)
}
