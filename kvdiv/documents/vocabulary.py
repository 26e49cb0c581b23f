"""Word material for the synthetic tasks: embedded word lists, pseudo-words, filler text, UUIDs.

Everything here is written for kvdiv (no benchmark data is copied). The filler sentences form the
"noise" haystack of the needle tasks: plain, repetitive statements that carry no information a
question could ask for.
"""

from __future__ import annotations

import uuid

import numpy as np

ADJECTIVES: tuple[str, ...] = tuple(
    """
    amber ancient angry bitter bold brave brief bright broad calm careful cheap chilly clever cloudy
    coastal cold cosmic crisp curious damp dark deep dense distant dry dusty eager early eastern empty
    faint fancy fast fierce flat fond fragile fresh friendly frozen gentle giant gifted glad golden
    grand green grey happy hardy heavy hidden hollow honest humble hungry icy idle jolly keen kind
    large late lazy light little lively lonely loud lucky lunar mellow merry mighty misty modern
    narrow neat nervous noble northern odd old orange pale patient plain polite proud purple quick
    quiet rapid rare ready red rich rigid rough round royal rural rusty sacred salty sandy secret
    sharp shiny short silent silver simple sleepy slow small smooth soft solar solid sour southern
    spare spicy steady steep stormy strange strong sturdy sunny sweet swift tall tame tender thick
    thin tidy tiny tired tough tranquil urban vast velvet vivid warm wary weary western wild windy
    wise witty wooden young zealous
    """.split()
)

NOUNS: tuple[str, ...] = tuple(
    """
    acorn anchor apple arrow badge bakery balloon banana barn basket beacon bell bicycle blanket
    boat bottle bridge brook bucket butter cabin cactus camera candle canoe canyon carpet castle
    cellar chair cherry chimney cliff clock cloud compass copper cottage crayon crown cup curtain
    desert diamond dolphin door dragon drum eagle engine falcon feather fence ferry fiddle forest
    fountain fox garden glacier glove goat grape harbor harp hammer hat hawk helmet hill honey
    horizon island jacket jungle kettle kite ladder lagoon lamp lantern lemon library lighthouse
    lily lion magnet maple market meadow mirror mountain needle nest oak ocean olive orchard otter
    owl paddle palace panda parrot pebble pencil pepper piano pillow planet pocket pond potato
    puzzle quarry rabbit radio raven ribbon river robot rocket saddle sail salmon satchel scarf
    shell shovel signal skate sled spoon squirrel stable statue stone stove sugar summit table
    teapot temple thistle thunder tiger tower tractor trumpet tulip tunnel turtle umbrella valley
    violin wagon walnut whistle willow window wizard yarn zebra
    """.split()
)

#: First names of the characters of stories and letters.
NAMES: tuple[str, ...] = tuple(
    """
    Ada Alma Anton Bela Bruno Clara Dario Edith Elias Emil Flora Greta Hugo Ida Ines Ivo Jonas Juno Karl Lena
    Linus Lotte Marta Mila Nils Nora Olga Oskar Paula Pavel Rosa Rudi Sara Selma Tilda Timo Ugo Vera Viktor Wanda
    """.split()
)

#: Verbs of story events, in the past tense (``{name} {verb} the {object} at the {place}``).
VERBS: tuple[str, ...] = tuple(
    """
    found lost carried painted repaired sold bought hid buried washed opened dropped borrowed polished weighed
    measured wrapped hung guarded counted cleaned mended traded tested
    """.split()
)

#: Places of story events.
PLACES: tuple[str, ...] = tuple(
    """
    harbor market bakery bridge library orchard cellar garden meadow mill station tower quarry stable school
    lighthouse cottage forest island chapel square workshop farm pier museum theater inn
    """.split()
)

#: Things a character can carry (the nouns of story objects, ``{adjective} {noun}``).
OBJECTS: tuple[str, ...] = tuple(
    """
    acorn anchor apple arrow badge balloon basket bell bicycle blanket boat bottle bucket camera candle canoe
    chair clock compass crayon crown cup curtain diamond drum feather fiddle glove hammer harp hat helmet jacket
    kettle kite ladder lamp lantern lemon magnet mirror needle paddle pebble pencil piano pillow puzzle radio
    ribbon rocket saddle satchel scarf shell shovel sled spoon statue stove teapot trumpet umbrella violin wagon
    walnut whistle
    """.split()
)

FILLER_SENTENCES: tuple[str, ...] = (
    "The morning was quiet and the road was long.",
    "A light wind moved across the open field.",
    "The river kept on flowing past the old stone wall.",
    "Birds sat on the fence and watched the day go by.",
    "Nothing much happened in the village that afternoon.",
    "The clouds drifted slowly over the distant hills.",
    "Someone left a lamp burning in the window.",
    "The path turned left and then went on again.",
)

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def filler_words() -> list[str]:
    """The filler text as a flat list of words (one cycle of :data:`FILLER_SENTENCES`)."""
    return " ".join(FILLER_SENTENCES).split()


def filler_pad(n_words: int) -> str:
    """The first ``n_words`` words of the cycled filler text (fine-grained length padding)."""
    words = filler_words()
    return " ".join(words[i % len(words)] for i in range(n_words))


def word_key(rng: np.random.Generator) -> str:
    """A two-word key such as ``quiet-lantern``."""
    return f"{ADJECTIVES[rng.integers(len(ADJECTIVES))]}-{NOUNS[rng.integers(len(NOUNS))]}"


def distinct_word_keys(rng: np.random.Generator, n: int, exclude: set[str] | None = None) -> list[str]:
    """``n`` distinct two-word keys not in ``exclude`` (at most len(ADJECTIVES)·len(NOUNS) in total)."""
    taken = set(exclude or ())
    if n + len(taken) > len(ADJECTIVES) * len(NOUNS):
        raise ValueError(f"cannot draw {n} distinct word keys: only {len(ADJECTIVES) * len(NOUNS)} exist")
    keys: list[str] = []
    while len(keys) < n:
        key = word_key(rng)
        if key not in taken:
            taken.add(key)
            keys.append(key)
    return keys


def distinct_objects(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct story objects ``{adjective} {noun}`` (e.g. ``amber lantern``)."""
    if n > len(ADJECTIVES) * len(OBJECTS) // 4:
        raise ValueError(f"cannot draw {n} distinct objects: at most {len(ADJECTIVES) * len(OBJECTS) // 4}")
    out: list[str] = []
    while len(out) < n:
        obj = f"{ADJECTIVES[rng.integers(len(ADJECTIVES))]} {OBJECTS[rng.integers(len(OBJECTS))]}"
        if obj not in out:
            out.append(obj)
    return out


def pseudo_word(rng: np.random.Generator, syllables: int = 3) -> str:
    """A pronounceable non-word of consonant–vowel syllables, e.g. ``tobemu``."""
    c = rng.integers(len(_CONSONANTS), size=syllables)
    v = rng.integers(len(_VOWELS), size=syllables)
    return "".join(_CONSONANTS[i] + _VOWELS[j] for i, j in zip(c, v))


def distinct_pseudo_words(rng: np.random.Generator, n: int, syllables: int = 3) -> list[str]:
    """``n`` distinct pseudo-words (syllable count grows when the space runs short)."""
    out: list[str] = []
    seen: set[str] = set()
    space = (len(_CONSONANTS) * len(_VOWELS)) ** syllables
    while len(out) < n:
        s = syllables + (1 if len(seen) > space // 2 else 0)
        w = pseudo_word(rng, s)
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def number_value(rng: np.random.Generator, digits: int = 7) -> str:
    """A decimal number with exactly ``digits`` digits (no leading zero)."""
    return str(int(rng.integers(10 ** (digits - 1), 10**digits)))


def uuid_value(rng: np.random.Generator) -> str:
    """A version-4 UUID drawn from ``rng`` (reproducible, unlike :func:`uuid.uuid4`)."""
    return str(uuid.UUID(bytes=rng.bytes(16), version=4))


def value(rng: np.random.Generator, kind: str) -> str:
    """A needle value of ``kind`` ``"number"`` or ``"uuid"``."""
    if kind == "number":
        return number_value(rng)
    if kind == "uuid":
        return uuid_value(rng)
    raise ValueError(f"unknown value kind {kind!r}; expected 'number' or 'uuid'")
