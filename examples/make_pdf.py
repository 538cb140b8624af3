"""Generate the example PDF ``examples/docs/solar-system.pdf``.

Run from the repository root::

    python examples/make_pdf.py

The output is deterministic: the creation date is fixed, so rerunning the
script produces a byte-identical file. Only the core Helvetica font and
Latin-1 characters are used, so no font files are needed. Requires fpdf2.
"""

from datetime import UTC, datetime
from pathlib import Path

from fpdf import FPDF

OUT = Path(__file__).resolve().parent / "docs" / "solar-system.pdf"
FIXED_DATE = datetime(2024, 1, 1, tzinfo=UTC)

PAGES = [
    (
        "Jupiter, King of the Planets",
        [
            "Jupiter is the largest planet in the Solar System. It is a gas giant "
            "made mostly of hydrogen and helium, and its mass is more than twice "
            "that of all the other planets put together. A day on Jupiter lasts "
            "just under ten hours, the shortest of any planet.",
            "In January 1610 the Italian astronomer Galileo Galilei turned his "
            "small telescope towards Jupiter and saw four points of light that "
            "changed position from night to night. He had discovered the four "
            "large moons now called the Galilean moons: Io, Europa, Ganymede and "
            "Callisto. They were the first objects ever seen orbiting another "
            "planet, and they helped to persuade astronomers that not everything "
            "in the sky circles the Earth.",
            "Each Galilean moon is a world of its own. Io is the most volcanically "
            "active body in the Solar System. Europa is covered by a shell of ice "
            "that probably hides a salty ocean. Ganymede, about 5,270 kilometres "
            "across, is the largest moon in the Solar System and is even bigger "
            "than the planet Mercury. Callisto is heavily cratered and ancient.",
            "Jupiter's most famous feature is the Great Red Spot, a giant storm "
            "in the southern hemisphere that is wider than the Earth. It has been "
            "observed continuously since at least the 1830s, although it has "
            "been shrinking in recent decades.",
        ],
    ),
    (
        "Saturn, Its Rings and Titan",
        [
            "Saturn, the sixth planet from the Sun, is the second-largest planet "
            "and the least dense: on average it is less dense than water. It is "
            "best known for its bright rings, which are made of countless pieces "
            "of water ice, ranging from tiny grains to chunks as large as a house. "
            "The main rings stretch more than 270,000 kilometres from edge to "
            "edge, yet in most places they are only about ten metres thick.",
            "The largest gap in the rings, the Cassini Division, is named after "
            "Giovanni Domenico Cassini, who discovered it in 1675.",
            "Saturn's largest moon, Titan, was discovered by the Dutch scientist "
            "Christiaan Huygens in 1655. Titan is the second-largest moon in the "
            "Solar System and the only moon with a thick atmosphere. Its air is "
            "mostly nitrogen, and the pressure at the surface is about one and a "
            "half times that on Earth. Titan is so cold that methane and ethane "
            "fall as rain and collect in lakes and seas near its poles.",
            "On 14 January 2005 the European Huygens probe, carried to Saturn by "
            "NASA's Cassini spacecraft, parachuted through the orange haze and "
            "landed on Titan. It was the first landing on a moon of another "
            "planet and remains the most distant landing ever made.",
        ],
    ),
]


def build(path: Path = OUT) -> None:
    pdf = FPDF(format="A4")
    pdf.set_title("The Giant Planets")
    pdf.set_author("ragidx examples")
    pdf.set_creation_date(FIXED_DATE)
    pdf.set_margins(20, 20, 20)
    for heading, paragraphs in PAGES:
        pdf.add_page()
        pdf.set_font("Helvetica", "B", 18)
        pdf.multi_cell(0, 10, heading)
        pdf.ln(4)
        pdf.set_font("Helvetica", size=12)
        for para in paragraphs:
            pdf.multi_cell(0, 7, para)
            pdf.ln(3)
    pdf.output(str(path))


if __name__ == "__main__":
    build()
    print(f"wrote {OUT}")
